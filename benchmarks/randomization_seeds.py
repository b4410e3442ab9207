"""Domain randomization over many seeds (issue 33): eqxrl's translation of Brax's PPO
against Brax's own PPO training step, each vmapped over seeds in one program.

Arms (`--arms`): `brax` (Brax's `ppo.train` body rebuilt as one function of the seed,
from Brax's own pieces), `eqxrl` and `eqxrl-statistics-after`
(`update_observation_statistics_first=False`), `(64, 64)` networks; a seed is solved
at a held-out greedy return of 990. Chunks of `--seeds-per-chunk` seeds until
`--chunks` or `--budget-s`. README: "Domain randomization against Brax's PPO".

    .venv-robot/bin/python benchmarks/randomization_seeds.py --quick   # a smoke run
"""

import dataclasses
import functools
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

try:
    from brax.training import acting
    from brax.training.acme import running_statistics, specs
    from brax.training.agents.ppo import losses, networks as ppo_networks
    from mujoco_playground import registry, wrapper
except ImportError:
    raise SystemExit(
        "this benchmark needs Brax and MuJoCo Playground: run it with "
        ".venv-robot/bin/python"
    ) from None

from _harness import block, command_line, greedy_return, seed_of
from randomization import QUICK, SETTINGS, TASK, BraxPolicy, randomize

import eqxrl
from eqxrl.envs import TimeLimit, brax_randomization, from_brax

ARMS = ("brax", "eqxrl", "eqxrl-statistics-after")
SOLVED = 990.0
HIDDEN = (64, 64)
NETWORKS = functools.partial(
    ppo_networks.make_ppo_networks,
    policy_hidden_layer_sizes=HIDDEN,
    value_hidden_layer_sizes=HIDDEN,
)


def brax_training(env: Any, settings: dict) -> Any:
    """Brax's `ppo.train` (Brax 0.14.2) as `(run, make_policy)`: `run(seed)` runs
    its training steps, their keys split as its trainer splits them on one device,
    with no evaluation and no host loop, and returns the parameters
    `make_policy` takes, `(normalizer, policy, value)`; `jax.vmap(run)` trains many
    seeds.

    What the trainer does between its epochs (evaluate, log, checkpoint) reads
    keys of its own and changes no training state, so it is left out."""
    s = settings
    num_envs, unroll_length = s["num_envs"], s["unroll_length"]
    batch_size, num_minibatches = s["batch_size"], s["num_minibatches"]
    unrolls_per_step = batch_size * num_minibatches // num_envs
    steps_per_training_step = batch_size * num_minibatches * unroll_length
    epochs = max(s["num_evals"] - 1, 1)
    training_steps_per_epoch = math.ceil(
        s["num_timesteps"] / (epochs * steps_per_training_step)
    )

    def environment(key_env):
        # Brax draws one randomization per environment from `key_env`.
        return wrapper.wrap_for_brax_training(
            env,
            episode_length=s["episode_length"],
            action_repeat=s["action_repeat"],
            randomization_fn=functools.partial(
                randomize, rng=jr.split(key_env, num_envs)
            ),
        )

    observation_size = env.observation_size
    network = NETWORKS(
        observation_size,
        env.action_size,
        preprocess_observations_fn=running_statistics.normalize,
    )
    make_policy = ppo_networks.make_inference_fn(network)
    optimizer = optax.adam(s["learning_rate"])
    loss = functools.partial(
        losses.compute_ppo_loss,
        ppo_network=network,
        entropy_cost=s["entropy_cost"],
        discounting=s["discounting"],
        reward_scaling=s["reward_scaling"],
        gae_lambda=s["gae_lambda"],
        clipping_epsilon=s["clipping_epsilon"],
        normalize_advantage=True,
        vf_coefficient=0.5,
    )
    loss_and_grad = jax.value_and_grad(loss, has_aux=True)

    def run(seed):
        key = jr.PRNGKey(seed)
        global_key, local_key = jr.split(key)
        local_key = jr.fold_in(local_key, 0)  # process 0
        local_key, key_env, _ = jr.split(local_key, 3)  # the last: evaluation's
        key_policy, key_value = jr.split(global_key)
        training_env = environment(key_env)
        env_state = training_env.reset(jr.split(key_env, num_envs))
        params = losses.PPONetworkParams(
            policy=network.policy_network.init(key_policy),
            value=network.value_network.init(key_value),
        )
        normalizer = running_statistics.init_state(
            specs.Array((observation_size,), jnp.dtype("float32"))
        )

        def minibatch_step(carry, data, normalizer):
            optimizer_state, params, key = carry
            key, key_loss = jr.split(key)
            _, grads = loss_and_grad(params, normalizer, data, key_loss)
            updates, optimizer_state = optimizer.update(grads, optimizer_state)
            return (optimizer_state, optax.apply_updates(params, updates), key), None

        def sgd_step(carry, _, data, normalizer):
            optimizer_state, params, key = carry
            key, key_permutation, key_grad = jr.split(key, 3)
            shuffled = jax.tree.map(
                lambda x: jr.permutation(key_permutation, x).reshape(
                    num_minibatches, -1, *x.shape[1:]
                ),
                data,
            )
            (optimizer_state, params, _), _ = jax.lax.scan(
                functools.partial(minibatch_step, normalizer=normalizer),
                (optimizer_state, params, key_grad),
                shuffled,
            )
            return (optimizer_state, params, key), None

        def training_step(carry, _):
            (optimizer_state, params, normalizer), env_state, key = carry
            key_sgd, key_unroll, next_key = jr.split(key, 3)
            policy = make_policy((normalizer, params.policy, params.value))

            def unroll(carry, _):
                env_state, key = carry
                key, next_key = jr.split(key)
                env_state, data = acting.generate_unroll(
                    training_env,
                    env_state,
                    policy,
                    key,
                    unroll_length,
                    extra_fields=("truncation", "episode_metrics", "episode_done"),
                )
                return (env_state, next_key), data

            (env_state, _), data = jax.lax.scan(
                unroll, (env_state, key_unroll), (), length=unrolls_per_step
            )
            # [unrolls, unroll_length, num_envs] -> [unrolls * num_envs, unroll_length]
            data = jax.tree.map(lambda x: jnp.swapaxes(x, 1, 2), data)
            data = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), data)
            # Brax merges the batch into its normalizer before the updates.
            normalizer = running_statistics.update(normalizer, data.observation)
            (optimizer_state, params, _), _ = jax.lax.scan(
                functools.partial(sgd_step, data=data, normalizer=normalizer),
                (optimizer_state, params, key_sgd),
                (),
                length=s["num_updates_per_batch"],
            )
            return ((optimizer_state, params, normalizer), env_state, next_key), None

        def epoch(carry, _):
            learner, env_state, local_key = carry
            epoch_key, local_key = jr.split(local_key)
            (epoch_key,) = jr.split(epoch_key, 1)  # one device's key
            (learner, env_state, _), _ = jax.lax.scan(
                training_step,
                (learner, env_state, epoch_key),
                (),
                length=training_steps_per_epoch,
            )
            return (learner, env_state, local_key), None

        learner = (optimizer.init(params), params, normalizer)
        ((_, params, normalizer), _, _), _ = jax.lax.scan(
            epoch, (learner, env_state, local_key), (), length=epochs
        )
        return normalizer, params.policy, params.value

    return run, make_policy


def eqxrl_training(env: Any, settings: dict, statistics_first: bool) -> Any:
    """eqxrl's translation with `(64, 64)` networks: the `PPO`, its statistics
    updated before the epochs (`statistics_first`) or after them."""
    ppo = eqxrl.PPO.from_brax_hyperparameters(
        from_brax(env), randomization_fn=randomize, network_factory=NETWORKS, **settings
    )
    ppo = dataclasses.replace(ppo, update_observation_statistics_first=statistics_first)
    return ppo


def main() -> None:
    args = command_line(
        __doc__,
        seeds_per_chunk={"type": int, "help": "(64)"},
        chunks={"type": int, "help": "(1)"},
        first_seed={"type": int, "default": 0, "help": "chunk 0's first"},
        budget_s={
            "type": float,
            "default": math.inf,
            "help": "start no chunk that the last one's time says would end after this",
        },
        arms=ARMS,
        eval_episodes={"type": int, "help": "(32)"},
        quick={"action": "store_true", "help": "toy sizes, 2 seeds: a smoke run"},
        out={"type": Path, "help": "write a JSON here"},
    ).parse_args()
    per_chunk = args.seeds_per_chunk or (2 if args.quick else 64)
    chunks = args.chunks or 1
    episodes = args.eval_episodes or (2 if args.quick else 32)
    settings = {**SETTINGS, **(QUICK if args.quick else {})}
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    began = time.perf_counter()

    env = registry.load(TASK, config_overrides={"impl": "jax"})
    eval_env = brax_randomization(
        TimeLimit(from_brax(env), settings["episode_length"]), randomize
    )
    brax_run, brax_make_policy = brax_training(env, settings)
    programs = {
        "brax": jax.jit(jax.vmap(brax_run)),
        "eqxrl": eqxrl_training(env, settings, statistics_first=True),
        "eqxrl-statistics-after": eqxrl_training(env, settings, statistics_first=False),
    }
    device = jax.devices()[0]
    summary: dict[str, Any] = dict(
        task=TASK,
        device=f"{device.platform}: {device.device_kind}",
        jax=jax.__version__,
        settings={k: str(v) for k, v in settings.items()},
        hidden=HIDDEN,
        eval_episodes=episodes,
        solved_at=SOLVED,
        returns={arm: {} for arm in args.arms},
    )
    print(f"jax {jax.__version__} on {summary['device']}; {TASK}", flush=True)
    chunk_seconds = 0.0  # the last chunk's, compilation included in the first
    for chunk in range(chunks):
        if time.perf_counter() - began + chunk_seconds > args.budget_s:
            print(f"budget spent: stopping before chunk {chunk}", flush=True)
            break
        chunk_start = time.perf_counter()
        first = args.first_seed + chunk * per_chunk
        seeds = list(range(first, first + per_chunk))
        for arm in args.arms:
            start = time.perf_counter()
            if arm == "brax":
                params = block(programs[arm](jnp.asarray(seeds)))
                policies = [
                    BraxPolicy(seed_of(params, i), brax_make_policy)
                    for i in range(len(seeds))
                ]
            else:
                ppo = programs[arm]
                keys = jax.vmap(jr.key)(jnp.asarray(seeds))  # randomization.py's
                states, _ = block(eqx.filter_vmap(ppo.train)(keys))
                policies = [
                    ppo.policy(seed_of(states, i), deterministic=True)
                    for i in range(len(seeds))
                ]
            trained = time.perf_counter() - start
            returns = [
                greedy_return(policy, eval_env, seed, episodes)
                for policy, seed in zip(policies, seeds)
            ]
            evaluated = time.perf_counter() - start - trained
            summary["returns"][arm].update(dict(zip(map(str, seeds), returns)))
            solved = sum(r >= SOLVED for r in returns)
            print(
                f"  chunk {chunk} ({seeds[0]}-{seeds[-1]}), {arm}: solved {solved} of "
                f"{len(seeds)}, mean {np.mean(returns):.1f} (trained and compiled in "
                f"{trained:.0f} s, evaluated in {evaluated:.0f} s)",
                flush=True,
            )
            if args.out is not None:
                args.out.write_text(json.dumps(summary, indent=2))
        chunk_seconds = time.perf_counter() - chunk_start
    for arm, by_seed in summary["returns"].items():
        returns = list(by_seed.values())
        if returns:
            solved = sum(r >= SOLVED for r in returns)
            print(
                f"{arm}: solved {solved} of {len(returns)} "
                f"({solved / len(returns):.0%}), mean {np.mean(returns):.1f}"
            )


if __name__ == "__main__":
    # Playground's environments broadcast arrays of different ranks.
    with jax.numpy_rank_promotion("allow"):
        main()
