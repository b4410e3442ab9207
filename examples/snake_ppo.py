"""Train PPO on Snake on the CPU, then watch the greedy policy play.

    python examples/snake_ppo.py --out runs/snake        # 6x6, MLP policy, 3M steps
    python examples/snake_ppo.py --size 10 --policy cnn --total-timesteps 5_000_000

Runs the same compiled PPO iteration in chunks (one compiled call per chunk, state
donated), prints progress between chunks, and writes under `--out`:

- `metrics.csv`: one row per iteration (episode return and length, losses, entropy,
  KL, ...);
- `learning_curve.png`: mean episode return against environment steps (needs
  matplotlib);
- `policy.eqx`: the greedy policy, in the format the `Trainer` writes: load it with
  `eqxrl.load_policy(OUT)` or evaluate it with `eqxrl eval OUT`;
- `config.json`: the flags;
- `snake.gif`: the greedy policy playing one game, rendered inside one compiled
  program (needs Pillow: `pip install "eqxrl[render]"`).

At the end it evaluates the trained policy (greedy and sampled) and a uniformly random
policy over valid moves on fresh games and prints their mean scores (food eaten per
game).
"""

import argparse
import csv
import json
import math
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=Path("runs/snake_ppo"))
    parser.add_argument("--size", type=int, default=6, help="board height and width")
    parser.add_argument(
        "--policy",
        choices=["mlp", "cnn", "transformer"],
        default="mlp",
        help="actor-critic: MLP on the flattened board (fastest to train on a CPU), "
        "CNNActorCritic or GridTransformerActorCritic",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=int, default=3_000_000)
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--num-epochs", type=int, default=4)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--clip-eps", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument(
        "--chunk",
        type=int,
        default=0,
        help="iterations per compiled call (0: a divisor of the number of "
        "iterations giving about 24 progress lines)",
    )
    parser.add_argument("--eval-games", type=int, default=256)
    parser.add_argument(
        "--gif-steps", type=int, default=300, help="most frames in the GIF"
    )
    return parser.parse_args()


# PPO's `network_factory` per `--policy`: eqxrl's own functions, which the policy file
# names, so that `eqxrl.load_policy` and `eqxrl eval` rebuild the network from it.
# `None` is PPO's default network, an MLP on the flattened board.
NETWORK_FACTORIES = {
    "mlp": None,
    "cnn": eqxrl.nn.CNNActorCritic.from_env,
    "transformer": eqxrl.nn.GridTransformerActorCritic.from_env,
}


def random_policy(observation, key, action_mask):
    """Uniform over the valid moves."""
    del observation
    return jr.categorical(key, jnp.where(action_mask, 0.0, -jnp.inf)).astype(jnp.int32)


@eqx.filter_jit
def evaluate(env, policy, key, num_games: int):
    """Mean food eaten per game over `num_games` full games, played in one batch until
    every game has ended."""
    reset_key, key = jr.split(key)
    states, timesteps = jax.vmap(env.reset)(jr.split(reset_key, num_games))
    act = jax.vmap(policy)

    def playing(carry):
        *_, done, _, _ = carry
        return ~jnp.all(done)

    def step(carry):
        states, timesteps, done, score, key = carry
        key, action_key, step_key = jr.split(key, 3)
        actions = act(
            timesteps.observation,
            jr.split(action_key, num_games),
            timesteps.action_mask,
        )
        states, timesteps = jax.vmap(env.step)(
            states, actions, jr.split(step_key, num_games)
        )
        score = jnp.where(done, score, states.length - 1)
        done = done | timesteps.terminated | timesteps.truncated
        return states, timesteps, done, score, key

    done = jnp.zeros(num_games, bool)
    score = jnp.zeros(num_games, jnp.int32)
    carry = (states, timesteps, done, score, key)
    *_, score, _ = jax.lax.while_loop(playing, step, carry)
    return score.astype(jnp.float32).mean()


@eqx.filter_jit
def record_game(env, policy, key, num_steps: int, cell_pixels: int):
    """Frames of one game (frozen on its last frame once it ends), rendered in jit."""
    reset_key, steps_key = jr.split(key)
    state, timestep = env.reset(reset_key)

    def step(carry, key):
        state, timestep, done = carry
        action_key, step_key = jr.split(key)
        action = policy(timestep.observation, action_key, timestep.action_mask)
        next_state, next_timestep = env.step(state, action, step_key)
        # Once the game is over, keep showing its final position.
        state = jax.tree.map(
            lambda new, old: jnp.where(done, old, new), next_state, state
        )
        timestep = jax.tree.map(
            lambda new, old: jnp.where(done, old, new), next_timestep, timestep
        )
        done = done | next_timestep.terminated | next_timestep.truncated
        return (state, timestep, done), (state, done)

    initial = (state, timestep, jnp.bool_(False))
    _, (states, done) = jax.lax.scan(step, initial, jr.split(steps_key, num_steps))
    states = jax.tree.map(
        lambda first, rest: jnp.concatenate([first[None], rest]), state, states
    )
    frames = jax.vmap(lambda state: env.render(state, cell_pixels))(states)
    # Frames to keep: the first, every step until the game ends, plus a short pause.
    num_frames = jnp.minimum(jnp.sum(~done) + 2 + 8, num_steps + 1)
    return frames, num_frames


def plot_learning_curve(env_steps, returns, path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(6, 3.5), dpi=120)
    axis.plot(env_steps, returns, color="#4c72b0", alpha=0.35, lw=1)
    window = max(1, len(returns) // 25)
    smooth = np.convolve(
        np.nan_to_num(returns, nan=np.nanmean(returns)),
        np.ones(window) / window,
        "valid",
    )
    axis.plot(env_steps[window - 1 :], smooth, color="#4c72b0", lw=2)
    axis.set_xlabel("environment steps")
    axis.set_ylabel("mean episode return")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env_kwargs = {"height": args.size, "width": args.size}
    env = eqxrl.envs.make("Snake-v0", **env_kwargs)
    ppo = eqxrl.PPO(
        env=env,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.total_timesteps,
        num_epochs=args.num_epochs,
        num_minibatches=args.num_minibatches,
        learning_rate=args.learning_rate,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        clip_eps=args.clip_eps,
        ent_coef=args.ent_coef,
        vf_coef=args.vf_coef,
        network_factory=NETWORK_FACTORIES[args.policy],
        # Snake's observations are 0/1: uint8 stores them exactly, in 1/4 the memory.
        observation_storage_dtype=jnp.uint8,
    )
    steps_per_iteration = ppo.num_envs * ppo.num_steps
    print(
        f"PPO on Snake {args.size}x{args.size} with the {args.policy} policy | "
        f"device {jax.devices()[0].device_kind} | {ppo.num_iterations} iterations "
        f"x {steps_per_iteration} steps"
    )

    @eqx.filter_jit(donate="all-except-first")
    def run_chunk(ppo, state, num_iterations):
        return ppo.train_iterations(state, num_iterations)

    # Equal chunks, so that one compiled program serves every chunk.
    target = args.chunk or max(1, ppo.num_iterations // 24)
    divisors = [
        d for d in range(1, ppo.num_iterations + 1) if ppo.num_iterations % d == 0
    ]
    chunk = min(divisors, key=lambda d: abs(d - target))
    state = eqx.filter_jit(ppo.init)(jr.key(args.seed))
    history: list[dict[str, np.ndarray]] = []
    done_iterations = 0
    start = time.perf_counter()
    print("compiling the training iteration (the first chunk includes it) ...")
    while done_iterations < ppo.num_iterations:
        chunk_start = time.perf_counter()
        state, metrics = run_chunk(ppo, state, chunk)
        history.append(jax.device_get(metrics))
        done_iterations += chunk
        now = time.perf_counter()
        returns = history[-1]["episode_return"]
        lengths = history[-1]["episode_length"]
        recent = np.nanmean(returns) if not np.isnan(returns).all() else math.nan
        length = np.nanmean(lengths) if not np.isnan(lengths).all() else math.nan
        steps = done_iterations * steps_per_iteration
        speed = chunk * steps_per_iteration / (now - chunk_start)
        note = " (incl. compile)" if len(history) == 1 else ""
        print(
            f"{steps:>10,d}/{ppo.total_timesteps:,d} steps "
            f"| {speed:>7,.0f} steps/s{note} | return {recent:6.2f} "
            f"| episode length {length:6.1f} | {now - start:5.0f} s",
            flush=True,
        )
    train_seconds = time.perf_counter() - start

    metrics = {k: np.concatenate([m[k] for m in history]) for k in history[0]}
    env_steps = np.arange(1, ppo.num_iterations + 1) * steps_per_iteration
    with open(args.out / "metrics.csv", "w", newline="") as file:
        writer = csv.writer(file)
        names = sorted(metrics)
        writer.writerow(["iteration", "env_steps", *names])
        for i in range(ppo.num_iterations):
            row = [metrics[name][i].item() for name in names]
            writer.writerow([i + 1, env_steps[i], *row])
    title = f"PPO, Snake {args.size}x{args.size}, {args.policy} policy"
    plotted = plot_learning_curve(
        env_steps, metrics["episode_return"], args.out / "learning_curve.png", title
    )
    # The environment's id and arguments go into the file: it loads on its own.
    eqxrl.training.save_policy(
        args.out / "policy.eqx",
        state,
        ppo,
        env_name="Snake-v0",
        env_kwargs=env_kwargs,
        metadata={"iteration": ppo.num_iterations, "seed": args.seed},
    )
    config = {
        "env": "Snake-v0",
        "algorithm": "PPO",
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "train_seconds": round(train_seconds, 1),
        "eqxrl_version": eqxrl.__version__,
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    eval_key = jr.key(args.seed + 1)
    greedy = ppo.policy(state, deterministic=True)
    scores = {
        "greedy": evaluate(env, greedy, eval_key, args.eval_games),
        "sampled": evaluate(env, ppo.policy(state), eval_key, args.eval_games),
        "random": evaluate(env, random_policy, eval_key, args.eval_games),
    }
    print(
        f"trained in {train_seconds:.0f} s | mean score (food per game, "
        f"{args.eval_games} games): "
        + ", ".join(f"{name} {float(score):.2f}" for name, score in scores.items())
    )
    written = ["metrics.csv", "policy.eqx", "config.json"]
    if plotted:
        written.append("learning_curve.png")
    cell_pixels = max(16, 240 // args.size)  # about 240 pixels across
    frames, num_frames = record_game(
        env, greedy, jr.key(args.seed + 2), args.gif_steps, cell_pixels
    )
    try:
        eqxrl.envs.save_gif(frames[: int(num_frames)], args.out / "snake.gif", fps=12)
        written.append("snake.gif")
    except ImportError as error:
        print(f"no GIF: {error}")
    print(f"evaluate the policy again: eqxrl eval {args.out}")
    print(f"wrote {args.out}/: {', '.join(written)}")


if __name__ == "__main__":
    main()
