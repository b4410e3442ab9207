"""Multi-agent learners (`eqxrl.multiagent`) against Sorrel and JaxMARL.

Parts (`--parts`; README: "Independent learners on Treasure Hunt" and the two JaxMARL
sections): `sorrel` (Sorrel's experiment: wall time, FLOPs, `--seeds` learning curves,
`--curve FILE`), `scaling` (`--worlds` x `--agents`), `loop` (a Python loop over
agents against one program), `jaxmarl` (IPPO against `--jaxmarl-baseline
.../ippo_ff_mpe.py`), `mappo`, `vdn`, `qmix` (against the baselines in `--jaxmarl-dir`,
a clone of github.com/FLAIROx/JaxMARL; `--marl-pairs` runs, or `--marl-seeds N` for
the learning bar). Parts whose peers are missing say why and skip.

    .venv/bin/python benchmarks/multiagent.py --parts sorrel --seeds 4
    .venv/bin/python benchmarks/multiagent.py --parts mappo vdn qmix \\
        --jaxmarl-dir ../JaxMARL --marl-timesteps 300000 --marl-pairs 5
"""

import functools
import time
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _harness import (
    Program,
    alternate,
    block,
    command_line,
    compile_timed,
    final_return,
    import_file,
    last_part,
    lowered_program,
    missing,
    peer_promotion,
    print_comparison,
    timed,
    train_seeds,
)

import eqxrl

PARTS = ("sorrel", "scaling", "loop", "jaxmarl", "mappo", "vdn", "qmix")
SORREL_SECONDS = 332.0  # Sorrel 1.6.0's 1000-epoch treasurehunt run
SORREL_LAST_100 = 37.0  # its total reward per epoch over the last 100 epochs


def treasure_hunt(num_agents: int):
    return eqxrl.envs.make("TreasureHunt-v0", num_agents=num_agents)


def sorrel(options) -> None:
    env = eqxrl.envs.make("TreasureHunt-v0")
    learners = eqxrl.multiagent.Independent.from_sorrel(env, num_epochs=options.epochs)
    train = eqx.filter_jit(lambda key: learners.train(key))
    compiled, compile_seconds = compile_timed(train, jax.random.key(0))
    block(compiled(jax.random.key(0)))  # warm-up
    seconds, _ = timed(compiled, jax.random.key(1))
    per_1000 = seconds * 1000 / options.epochs
    print(
        f"sorrel experiment: 2 agents, {options.epochs} epochs x 100 turns, 1 world: "
        f"compile {compile_seconds:.1f} s, run {seconds:.2f} s ({per_1000:.2f} s per "
        f"1000 epochs), {SORREL_SECONDS / per_1000:.1f}x faster than Sorrel's "
        f"{SORREL_SECONDS:.0f} s"
    )
    # What one world can reach here: the experiment's arithmetic against this
    # machine's matrix product speed.
    total_flops = sorrel_flops(learners) * 1000
    size = options.matmul_size
    print(
        f"sorrel arithmetic: XLA counts {total_flops / 1e12:.2f} TFLOP per 1000 "
        f"epochs; this run sustained {total_flops / per_1000 / 1e9:.0f} GFLOP/s, 50x "
        f"Sorrel needs {total_flops * 50 / SORREL_SECONDS / 1e9:.0f} GFLOP/s, a "
        f"{size}x{size} matrix product here runs at {matmul_gflops(size):.0f} GFLOP/s"
    )
    keys = jax.random.split(jax.random.key(2026), options.seeds)
    if options.seeds == 1:  # the program timed above
        seconds, (_, metrics) = timed(compiled, keys[0])
        metrics = jax.tree.map(lambda x: x[None], metrics)
    else:
        train_seeds = eqx.filter_jit(eqx.filter_vmap(lambda key: learners.train(key)))
        compiled, compile_seconds = compile_timed(train_seeds, keys)
        seconds, (_, metrics) = timed(compiled, keys)
    totals = np.asarray(metrics["total_episode_return"])  # [seeds, epochs]
    first = totals[:, : min(10, options.epochs)].mean(axis=1)
    last = totals[:, -min(100, options.epochs) :].mean(axis=1)
    print(
        f"sorrel learning curve: {options.seeds} seed(s) vmapped, compile "
        f"{compile_seconds:.1f} s, run {seconds:.2f} s"
    )
    for seed, (a, b) in enumerate(zip(first, last)):
        print(f"  seed {seed}: first 10 epochs {a:.2f}, last 100 epochs {b:.2f}")
    print(
        f"total reward per epoch, mean of {options.seeds} seeds: first 10 epochs "
        f"{first.mean():.2f}, last 100 epochs {last.mean():.2f} (Sorrel: about 10, "
        f"then {SORREL_LAST_100:.0f})"
    )
    if options.curve:
        write_curve(options.curve, totals)


def write_curve(path: str, totals: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = min(20, totals.shape[1])
    kernel = np.ones(window) / window
    smooth = np.stack([np.convolve(t, kernel, mode="valid") for t in totals])
    epochs = np.arange(window, totals.shape[1] + 1)
    figure, axes = plt.subplots(figsize=(6, 3.5), dpi=120)
    axes.fill_between(epochs, smooth.min(0), smooth.max(0), alpha=0.25)
    axes.plot(epochs, smooth.mean(0), label=f"eqxrl, {len(totals)} seeds")
    axes.axhline(SORREL_LAST_100, color="grey", linestyle="--", linewidth=1)
    axes.text(epochs[0], SORREL_LAST_100 + 1, "Sorrel, last 100 epochs", fontsize=8)
    axes.set_xlabel("epoch (100 turns)")
    axes.set_ylabel(f"total reward per epoch\n({window}-epoch mean)")
    axes.set_title("Treasure Hunt, 2 independent IQN agents (Sorrel's settings)")
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    print(f"wrote {path}")


def learners_for(num_agents: int, num_worlds: int, steps: int, iterations: int):
    """Sorrel's learners on `num_agents` agents and `num_worlds` worlds, each
    iteration `steps` turns then one gradient step per agent, with a replay buffer
    of 16 rows (each a step of every world; at least 128 transitions)."""
    return eqxrl.multiagent.Independent.from_sorrel(
        treasure_hunt(num_agents),
        num_envs=num_worlds,
        num_epochs=iterations,
        train_frequency=steps,
        total_timesteps=iterations * steps * num_worlds,
        buffer_size=max(16 * num_worlds, 128),
    )


_COMPILED: dict = {}


def compiled_run(num_agents: int, num_worlds: int, steps: int, iterations: int):
    """`(learners, initial state, compiled train_iterations, compile seconds)`,
    compiled once per configuration (the scaling and loop parts share them)."""
    config = (num_agents, num_worlds, steps, iterations)
    if config not in _COMPILED:
        learners = learners_for(*config)
        state = block(eqx.filter_jit(learners.init)(jax.random.key(0)))
        run = eqx.filter_jit(lambda a, s: a.train_iterations(s, iterations))
        compiled, seconds = compile_timed(run, learners, state)
        _COMPILED[config] = (learners, state, compiled, seconds)
    return _COMPILED[config]


def scaling(options) -> None:
    print(
        f"scaling: agent-steps/s (compile s), {options.steps} turns per iteration, "
        f"{options.iterations} iterations timed"
    )
    print(f"{'worlds':>7} {'agents':>7} {'agent-steps/s':>14} {'compile s':>10}")
    for worlds in options.worlds:
        for agents in options.agents:
            learners, state, compiled, compile_seconds = compiled_run(
                agents, worlds, options.steps, options.iterations
            )
            state = block(compiled(learners, state)[0])  # warm-up
            seconds, _ = timed(compiled, learners, state)
            agent_steps = options.iterations * options.steps * worlds * agents
            print(
                f"{worlds:>7} {agents:>7} {agent_steps / seconds:>14,.0f} "
                f"{compile_seconds:>10.1f}",
                flush=True,
            )


def agent_view(timestep, i):
    """Agent `i`'s view of a stacked multi-agent timestep: what a single-agent
    learner of `Independent` sees."""
    observation = timestep.observation[:, i]
    final = timestep.extras["final_observation"][:, i]
    extras = {**timestep.extras, "final_observation": final}
    extras["episode_return"] = timestep.extras["episode_return"][:, i]
    return eqx.tree_at(
        lambda t: (t.observation, t.reward, t.extras),
        timestep,
        (observation, timestep.reward[:, i], extras),
    )


def separate_learners(learners):
    """`learners` (an `Independent`) taken apart: the worlds reset by a jitted
    function of their own and one eqxrl learner state per agent. Returns
    `(env, env_state, timestep, view, agents)`."""
    learner = learners.algorithm
    num_agents, num_worlds = learners.num_agents, learners.num_envs
    env = learner.training_env
    keys = jax.random.split(jax.random.key(0), num_agents + 1)
    reset = eqx.filter_jit(lambda keys: jax.vmap(env.reset)(keys))
    env_state, timestep = reset(jax.random.split(keys[0], num_worlds))
    view = eqx.filter_jit(agent_view, donate="none")
    init = eqx.filter_jit(learner.init_learner)
    agents = [init(keys[i + 1], view(timestep, i)) for i in range(num_agents)]
    return env, env_state, timestep, view, agents


def program_flops(function, *args) -> float:
    """The floating-point operations XLA counts in `function(*args)` (no loops
    inside: a loop body would be counted once)."""
    lowered = eqx.filter_jit(function).lower(*args).lowered
    analysis = lowered.compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return float(analysis["flops"])


def matmul_gflops(size: int = 2048) -> float:
    """This machine's float32 matrix product speed, GFLOP/s (best of 5)."""
    a = jnp.ones((size, size), jnp.float32)
    product = jax.jit(lambda a: a @ a)
    product(a).block_until_ready()
    best = min(timed(product, a)[0] for _ in range(5))
    return 2 * size**3 / best / 1e9


def sorrel_flops(learners) -> float:
    """The network FLOPs of one epoch of Sorrel's experiment, as XLA counts them:
    every agent acts once per turn and makes one gradient step per epoch."""
    learner = learners.algorithm
    _, _, _, _, agents = separate_learners(learners)
    agent, num_worlds = agents[0], learners.num_envs
    key = jax.random.key(0)
    # The keys and uniform draws are arguments: as constants, XLA would fold the
    # epsilon-greedy choice and drop the network.
    act_keys = jax.random.split(key, num_worlds)
    uniform = jnp.ones((num_worlds,))

    def learn(network, target, optimizer_state, buffer, num_updates):
        learning = jnp.bool_(True)
        return learner.learn(
            network, target, optimizer_state, buffer, learning, num_updates, key, key
        )

    act_flops = program_flops(
        learner.act, agent.network, agent.timestep, jnp.int32(0), act_keys, uniform
    )
    learn_flops = program_flops(
        learn,
        agent.network,
        agent.target_network,
        agent.optimizer_state,
        agent.buffer,
        agent.num_updates,
    )
    turns = learner.train_frequency
    return learners.num_agents * (turns * act_flops + learn_flops)


def python_loop(learners, iterations: int):
    """`iterations` iterations of `learners` (an `Independent`) run as a Python loop
    over its agents: one eqxrl learner per agent, each with its own jitted
    functions, the worlds stepped by a jitted function of their own. Returns the
    compile-inclusive first iteration's seconds and the seconds of the others."""
    learner = learners.algorithm
    num_agents, num_worlds = learners.num_agents, learners.num_envs
    steps = learner.train_frequency
    env, env_state, timestep, view, agents = separate_learners(learners)
    act = eqx.filter_jit(learner.act)
    store = eqx.filter_jit(learner.store)
    learn = eqx.filter_jit(learner.learn)
    step = eqx.filter_jit(lambda s, a, k: jax.vmap(env.step)(s, a, k))
    durations = []
    key = jax.random.key(1)
    for iteration in range(iterations):
        start = time.perf_counter()
        for index in range(steps):
            key, step_key, *agent_keys = jax.random.split(key, 2 + num_agents)
            actions = []
            for agent, agent_key in zip(agents, agent_keys):
                value_key, uniform_key = jax.random.split(agent_key)
                actions.append(
                    act(
                        agent.network,
                        agent.timestep,
                        jnp.int32((iteration * steps + index) * num_worlds),
                        jax.random.split(value_key, num_worlds),
                        jax.random.uniform(uniform_key, (num_worlds,)),
                    )
                )
            joint = jnp.stack(actions, axis=1)
            env_state, timestep = step(
                env_state, joint, jax.random.split(step_key, num_worlds)
            )
            for i, agent in enumerate(agents):
                next_view = view(timestep, i)
                buffer, _ = store(agent.buffer, agent.timestep, actions[i], next_view)
                agents[i] = eqx.tree_at(
                    lambda a: (a.buffer, a.timestep), agent, (buffer, next_view)
                )
        learning = jnp.bool_(True)
        for i, agent in enumerate(agents):
            key, sample_key, loss_key = jax.random.split(key, 3)
            network, target, optimizer_state, num_updates, _ = learn(
                agent.network,
                agent.target_network,
                agent.optimizer_state,
                agent.buffer,
                learning,
                agent.num_updates,
                sample_key,
                loss_key,
            )
            agents[i] = eqx.tree_at(
                lambda a: (
                    a.network,
                    a.target_network,
                    a.optimizer_state,
                    a.num_updates,
                ),
                agent,
                (network, target, optimizer_state, num_updates),
            )
        block(agents)
        durations.append(time.perf_counter() - start)
    return durations[0], sum(durations[1:])


def loop(options) -> None:
    print(
        f"loop: {options.loop_worlds} world(s), {options.steps} turns per iteration, "
        f"{options.loop_iterations} iterations timed; agent-steps/s"
    )
    print(f"{'agents':>7} {'one program':>12} {'Python loop':>12} {'speed-up':>9}")
    for agents in options.loop_agents:
        iterations = options.loop_iterations
        learners, state, compiled, _ = compiled_run(
            agents, options.loop_worlds, options.steps, iterations
        )
        block(compiled(learners, state))  # warm-up
        fused, _ = timed(compiled, learners, state)
        _, looped = python_loop(learners, iterations + 1)
        agent_steps = iterations * options.steps * options.loop_worlds * agents
        print(
            f"{agents:>7} {agent_steps / fused:>12,.0f} {agent_steps / looped:>12,.0f} "
            f"{looped / fused:>8.1f}x",
            flush=True,
        )


def load_jaxmarl_baseline(path: str, wandb=None):
    """A JaxMARL baseline script as a module (its `make_train`). The scripts import
    wandb for their logging: where it is not installed, a stand-in that does
    nothing (as disabled wandb), or `wandb`, one that records."""
    modules = None if wandb is None else {"wandb": wandb}
    return import_file(path, ("wandb",), modules=modules, keep=True)


def jaxmarl_program(train, steps: int, facts) -> Program:
    """JaxMARL's `train(key)` compiled and run with the promotion rules its code
    is written for."""
    with peer_promotion():
        compiled, seconds = compile_timed(jax.jit(train), jax.random.PRNGKey(0))

    def run(seed: int):
        with peer_promotion():
            return timed(compiled, jax.random.PRNGKey(seed))

    return Program(run, steps, seconds, facts)


def side_by_side(name: str, ours, theirs: Program, pairs: int, last: str) -> None:
    """`pairs` alternating runs of eqxrl's `ours` and JaxMARL's: environment
    steps/s (compile time apart), and each run's team return over the `last`
    iterations."""

    def facts(output, seed: int) -> dict:
        team = output[1]["total_episode_return"]
        value = final_return(team) if last == "10 iterations" else last_part(team)
        return {"return": float(value)}

    ours = lowered_program(ours, theirs.work, facts)
    print(
        f"{name} on {MPE}: {theirs.work:,} steps per run; compile eqxrl "
        f"{ours.compile_seconds:.1f} s, JaxMARL {theirs.compile_seconds:.1f} s",
        flush=True,
    )
    result = alternate({"eqxrl": ours, "JaxMARL": theirs}, pairs)
    print_comparison(result)
    for side in result.programs:
        values = np.asarray(result.fact(side, "return"))
        print(
            f"{name} team return, last {last}, {side}: mean "
            f"{values.mean():.1f} (seeds {', '.join(f'{v:.1f}' for v in values)})"
        )


def jaxmarl_ippo(options) -> None:
    """eqxrl's parameter-shared IPPO against JaxMARL's, same settings, alternating."""
    path = options.jaxmarl_baseline
    why = missing("jaxmarl", "flax", "distrax", "hydra")
    if path is None or why:
        print(f"jaxmarl: skipped ({why or 'no --jaxmarl-baseline'}); see the docstring")
        return
    # JaxMARL's config/ippo_ff_mpe.yaml, with a CPU-sized TOTAL_TIMESTEPS.
    # fmt: off
    config = {
        "LR": 2.5e-4, "NUM_ENVS": 16, "NUM_STEPS": 128,
        "TOTAL_TIMESTEPS": options.jaxmarl_timesteps, "UPDATE_EPOCHS": 4,
        "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2,
        "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh",
        "ENV_NAME": MPE, "ENV_KWARGS": {}, "ANNEAL_LR": True,
    }
    # fmt: on
    baseline = load_jaxmarl_baseline(path)
    env = eqxrl.envs.from_jaxmarl(config["ENV_NAME"])
    # The same keys as PureJaxRL's: 64x64 tanh MLP, Adam with annealing.
    ppo = eqxrl.PPO.from_purejaxrl_config(env, config)
    # JaxMARL's baseline shares one network across agents: so does this one.
    ours = eqxrl.multiagent.Independent(ppo, share_parameters=True)
    steps = ppo.num_iterations * ppo.num_envs * ppo.num_steps

    def facts(out, seed: int) -> dict:
        # MPELogWrapper logs every agent's reward times the number of agents, and
        # the agents share the team's reward: its returns are the team's.
        logged = np.asarray(out["metrics"]["returned_episode_returns"])[-10:]
        return {"return": float(np.mean(logged))}

    theirs = jaxmarl_program(baseline.make_train(dict(config)), steps, facts)
    print(
        f"IPPO (one network shared by the agents), {config['NUM_ENVS']} envs x "
        f"{config['NUM_STEPS']} steps"
    )
    side_by_side("IPPO", ours, theirs, options.pairs, "10 iterations")


# ------------------------------------------------------------------------------------
# Cooperative learners against JaxMARL's baselines (MAPPO, VDN, QMIX)
# ------------------------------------------------------------------------------------

MPE = "MPE_simple_spread_v3"


def jaxmarl_config(root: str, *relative: str) -> dict:
    """JaxMARL's Hydra config files merged as its scripts merge them (the main
    `config.yaml`, then `alg/...`), through OmegaConf, so numbers like `2e-3`
    are floats as Hydra reads them."""
    from omegaconf import OmegaConf

    config: dict = {}
    for path in relative:
        loaded = OmegaConf.to_container(OmegaConf.load(f"{root}/{path}"))
        config.update(loaded)
    return config


def cooperative_missing(options) -> str | None:
    """Why the cooperative parts cannot run here, or `None`."""
    why = missing("jaxmarl", "flax", "distrax", "hydra", "omegaconf", "flashbax")
    return why or (None if options.jaxmarl_dir else "no --jaxmarl-dir")


def logged_by_callback():
    """A wandb stand-in that keeps what JaxMARL's scripts log from their callbacks
    (their only record of returns), and the list it appends to."""
    logged: list[dict] = []

    def log(row, *args, **kwargs):
        logged.append({key: float(np.asarray(value)) for key, value in row.items()})

    return logged, types.SimpleNamespace(init=lambda *a, **k: None, log=log)


def compare(name, ours, train, logged, rows_return, options) -> None:
    """The speed pairs (`--marl-pairs`), or with `--marl-seeds` the learning bar."""
    if options.marl_seeds:
        learning_curves(name, ours, train, logged, rows_return, options)
        return
    steps = ours.num_iterations * ours.steps_per_iteration

    def facts(out, seed: int) -> dict:
        # The callback's rows of this run: one per update.
        return {"return": rows_return(logged[-ours.num_iterations :])}

    theirs = jaxmarl_program(train, steps, facts)
    side_by_side(name, ours, theirs, options.marl_pairs, "10% of iterations")


def learning_curves(name, ours, theirs, logged, theirs_return, options) -> None:
    """The learning bar: `options.marl_seeds` seeds vmapped on both sides (one
    program each, as JaxMARL's scripts vmap `NUM_SEEDS`); the team return over
    the last 10% of iterations per seed, their mean and range. JaxMARL's rows come
    from its logging callback, which vmap calls once per seed in seed order."""
    seeds = options.marl_seeds
    results = []
    if options.marl_side in ("both", "eqxrl"):
        _, metrics, *seconds = train_seeds(ours, seeds, 1000)
        curves = last_part(metrics["total_episode_return"])
        results.append(("eqxrl", curves, sum(seconds)))
    if options.marl_side in ("both", "jaxmarl"):
        logged.clear()
        with peer_promotion():
            keys = jax.random.split(jax.random.PRNGKey(1000), seeds)
            seconds, _ = timed(jax.jit(jax.vmap(theirs)), keys)
        values = [theirs_return(logged[seed::seeds]) for seed in range(seeds)]
        results.append(("JaxMARL", values, seconds))
    for side, values, seconds in results:
        values = np.asarray(values)
        print(
            f"{name} learning, {seeds} seeds vmapped ({seconds:.0f} s with "
            f"compilation), team return over the last 10%, {side}: mean "
            f"{values.mean():.1f}, range {values.min():.1f} to {values.max():.1f} "
            f"(seeds {', '.join(f'{v:.1f}' for v in values)})",
            flush=True,
        )


def mappo(options) -> None:
    """Recurrent MAPPO, one network shared by the agents, critic on the world
    state (the concatenated observations), against JaxMARL's
    `baselines/MAPPO/mappo_rnn_mpe.py` at its `mappo_homogenous_rnn_mpe` config."""
    why = cooperative_missing(options)
    if why:
        print(f"mappo: skipped ({why}); see the module docstring")
        return
    root = f"{options.jaxmarl_dir}/baselines/MAPPO"
    config = jaxmarl_config(root, "config/mappo_homogenous_rnn_mpe.yaml")
    config["TOTAL_TIMESTEPS"] = options.marl_timesteps
    logged, wandb = logged_by_callback()
    baseline = load_jaxmarl_baseline(f"{root}/mappo_rnn_mpe.py", wandb)
    env = eqxrl.envs.from_jaxmarl(config["ENV_NAME"])
    # JaxMARL's networks: Dense 128 (ReLU), GRU 128, Dense 128 (ReLU), a head;
    # one actor and one critic, the critic on the world state.
    network = functools.partial(
        eqxrl.nn.GRUActorCritic.from_env,
        hidden_size=config["GRU_HIDDEN_DIM"],
        encoder_sizes=(config["FC_DIM_SIZE"],),
        head_sizes=(config["GRU_HIDDEN_DIM"],),
        activation=jax.nn.relu,
    )
    c = config
    # fmt: off
    ppo = eqxrl.PPO(
        env=env, num_envs=c["NUM_ENVS"], num_steps=c["NUM_STEPS"],
        total_timesteps=c["TOTAL_TIMESTEPS"], learning_rate=c["LR"],
        anneal_lr=c["ANNEAL_LR"], num_epochs=c["UPDATE_EPOCHS"],
        num_minibatches=c["NUM_MINIBATCHES"], gamma=c["GAMMA"],
        gae_lambda=c["GAE_LAMBDA"], clip_eps=c["CLIP_EPS"], ent_coef=c["ENT_COEF"],
        vf_coef=c["VF_COEF"], max_grad_norm=c["MAX_GRAD_NORM"],
        network_factory=network,
    )
    # fmt: on
    ours = eqxrl.multiagent.MAPPO(ppo, share_parameters=True)

    def rows_return(rows) -> float:
        # The team's return of the last episode of every world at each update
        # (MPELogWrapper scales every agent's reward by the number of agents, and
        # the mean over agents is then the team's).
        return float(last_part([row["returns"] for row in rows]))

    train = baseline.make_train(dict(config))
    compare("MAPPO", ours, train, logged, rows_return, options)


def value_decomposition(options, name: str) -> None:
    """VDN (feed-forward, `vdn_ff.py` at `vdn_ff_mpe`) or QMIX (JaxMARL's is
    recurrent, `qmix_rnn.py` at `ql_rnn_mpe`; eqxrl's agents are feed-forward)
    against JaxMARL's baseline."""
    why = cooperative_missing(options)
    if why:
        print(f"{name.lower()}: skipped ({why}); see the module docstring")
        return
    root = f"{options.jaxmarl_dir}/baselines/QLearning"
    alg = "vdn_ff_mpe.yaml" if name == "VDN" else "ql_rnn_mpe.yaml"
    config = jaxmarl_config(root, "config/config.yaml", f"config/alg/{alg}")
    config["TOTAL_TIMESTEPS"] = options.marl_timesteps
    # QMIX's rollouts are whole episodes from a reset, and its logged mean over
    # their steps counts the return once (on the last step): its greedy tests
    # (512 worlds, every 5% of the run) are printed beside it as a check.
    config["TEST_DURING_TRAINING"] = name == "QMIX"
    # Its only record of returns is what it logs to wandb (the stand-in's list).
    config["WANDB_MODE"] = "online"
    logged, wandb = logged_by_callback()
    script = "vdn_ff.py" if name == "VDN" else "qmix_rnn.py"
    baseline = load_jaxmarl_baseline(f"{root}/{script}", wandb)
    their_env, _ = baseline.env_from_config(dict(config))
    env = eqxrl.envs.from_jaxmarl(config["ENV_NAME"])
    cls = eqxrl.multiagent.VDN if name == "VDN" else eqxrl.multiagent.QMIX
    # QMIX like for like: JaxMARL's qmix_rnn agents are recurrent (GRU 64).
    recurrent = {"recurrent": options.qmix_agents == "gru"} if name == "QMIX" else {}
    ours = cls.from_jaxmarl(env, total_timesteps=config["TOTAL_TIMESTEPS"], **recurrent)

    def rows_return(rows) -> float:
        # The mean over agents and worlds of MPELogWrapper's returns (each agent's
        # reward scaled by the number of agents): the team's, at every update.
        values = np.asarray([row["returned_episode_returns"] for row in rows])
        if name == "QMIX" and not options.marl_seeds:
            tests = [row["test_returned_episode_returns"] for row in rows]
            print(f"    (JaxMARL's greedy tests, last 10%: {last_part(tests):.1f})")
        return float(last_part(values * (config["NUM_STEPS"] if name == "QMIX" else 1)))

    train = baseline.make_train(dict(config), their_env)
    compare(name, ours, train, logged, rows_return, options)


def main() -> None:
    options = command_line(
        __doc__,
        parts=PARTS,
        epochs=1000,
        seeds=4,
        curve={"metavar": "FILE"},
        worlds=[1, 64, 1024],
        agents=[2, 5, 10, 20],
        matmul_size={
            "type": int,
            "default": 2048,
            "help": "the matrix product the sorrel part's arithmetic is compared with "
            "(smaller: a check that the script runs, not a measurement)",
        },
        steps=20,
        iterations=2,
        loop_agents=[2, 5, 10, 20],
        loop_worlds=1,
        loop_iterations=3,
        jaxmarl_baseline={"metavar": "PATH"},
        jaxmarl_timesteps=1_000_000,
        pairs=5,
        jaxmarl_dir={"metavar": "PATH"},
        marl_timesteps=2_000_000,
        marl_pairs=4,
        marl_seeds=0,
        qmix_agents={
            "choices": ("gru", "mlp"),
            "default": "gru",
            "help": "eqxrl's QMIX agents: recurrent as JaxMARL's "
            "(QMIX.from_jaxmarl(env, recurrent=True)) or the feed-forward preset",
        },
        marl_side={
            "choices": ("both", "eqxrl", "jaxmarl"),
            "default": "both",
            "help": "with --marl-seeds, the side(s) to train: one side per process "
            "lets the two run at once (returns do not depend on the CPU's load)",
        },
    ).parse_args()
    print(f"[{jax.devices()[0].platform}, jax {jax.__version__}]")
    for part in options.parts:
        parts = {"sorrel": sorrel, "scaling": scaling, "loop": loop}
        parts["jaxmarl"] = jaxmarl_ippo
        parts["mappo"] = mappo
        parts["vdn"] = lambda options: value_decomposition(options, "VDN")
        parts["qmix"] = lambda options: value_decomposition(options, "QMIX")
        parts[part](options)


if __name__ == "__main__":
    main()
