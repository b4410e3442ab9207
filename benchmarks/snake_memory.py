"""PPO rollout memory on Snake: the formula, the compiled figure and the measured peak.

Per observation dtype (`float32`, `uint8`), in a process of its own: the storage
formula, the stacked `Transition`s' bytes, XLA's scratch for one `train_iteration`,
and with `--run` the peak resident memory of one iteration.

    python benchmarks/snake_memory.py --run   # 4096 envs x 128 steps, 10x10
"""

import json
import math
import resource

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from _harness import child_json, command_line, compile_timed, timed

import eqxrl

PER_STEP_SCALARS = 30  # action, log_prob, value, reward (4 each), flags (1+1),
# action mask (4 x 1), episode return and length (4 + 4)
PER_STEP_UPDATE = 16  # truncated values, next values, advantages, returns (4 each)


def make_ppo(args, dtype):
    env = eqxrl.envs.Snake(height=args.size, width=args.size)
    return eqxrl.PPO(
        env=env,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.num_envs * args.num_steps,
        num_minibatches=args.num_minibatches,
        network_factory=eqxrl.nn.CNNActorCritic.from_env,
        observation_storage_dtype=dtype,
    )


def rollout_bytes(ppo: eqxrl.PPO) -> int:
    """Bytes of one rollout's stacked transitions, as PPO stores them."""
    env = ppo.training_env

    def one_step(key):
        reset_key, action_key, step_key = jr.split(key, 3)
        state, timestep = env.reset(reset_key)
        action = env.action_space.sample(action_key)
        _, next_timestep = env.step(state, action, step_key)
        observation = timestep.observation
        if ppo.observation_storage_dtype is not None:
            observation = observation.astype(ppo.observation_storage_dtype)
        return eqxrl.buffers.Transition(
            observation=observation,
            action=action,
            log_prob=jnp.float32(0.0),
            value=jnp.float32(0.0),
            reward=next_timestep.reward,
            terminated=next_timestep.terminated,
            truncated=next_timestep.truncated,
            action_mask=timestep.action_mask,
            # PPO keeps the episode statistics of the environment's extras.
            extras={
                name: next_timestep.extras[name]
                for name in ("episode_return", "episode_length")
            },
        )

    keys = jr.split(jr.key(0), (ppo.num_steps, ppo.num_envs))
    transitions = jax.eval_shape(jax.vmap(jax.vmap(one_step)), keys)
    return sum(
        math.prod(leaf.shape) * leaf.dtype.itemsize
        for leaf in jax.tree.leaves(transitions)
    )


def analyse(args, dtype) -> dict:
    ppo = make_ppo(args, dtype)
    state = eqx.filter_jit(ppo.init)(jr.key(0))
    transition_bytes = rollout_bytes(ppo)
    dynamic, static = eqx.partition((ppo, state), eqx.is_array)

    def iteration(dynamic):
        ppo, state = eqx.combine(dynamic, static)
        return eqx.filter(ppo.train_iteration(state), eqx.is_array)

    compiled, compile_seconds = compile_timed(jax.jit(iteration), dynamic)
    result = {
        "transition_bytes": transition_bytes,
        "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
        "compile_seconds": compile_seconds,
    }
    if args.run:
        result["run_seconds"], _ = timed(compiled, dynamic)
        result["peak_rss_bytes"] = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        )
    return result


def main() -> None:
    args = command_line(
        __doc__,
        size=10,
        num_envs=4096,
        num_steps=128,
        num_minibatches=32,
        run=False,
        child={"choices": ["float32", "uint8"]},
    ).parse_args()
    dtypes = {"float32": None, "uint8": jnp.uint8}
    if args.child:
        print(json.dumps(analyse(args, dtypes[args.child])))
        return
    steps = args.num_envs * args.num_steps
    print(
        f"Snake {args.size}x{args.size}, PPO {args.num_envs} envs x {args.num_steps} "
        f"steps = {steps:,} transitions, CNN, {args.num_minibatches} minibatches of "
        f"{steps // args.num_minibatches:,}"
    )
    for name in dtypes:
        itemsize = jnp.dtype(name).itemsize
        observation = args.size * args.size * 3 * itemsize
        formula = steps * (observation + PER_STEP_SCALARS + PER_STEP_UPDATE)
        command = [__file__, "--child", name] + [
            f"--size={args.size}",
            f"--num-envs={args.num_envs}",
            f"--num-steps={args.num_steps}",
            f"--num-minibatches={args.num_minibatches}",
        ]
        if args.run:
            command.append("--run")
        result = child_json(command)
        line = (
            f"{name:>7}: formula {steps:,} x ({observation} + {PER_STEP_SCALARS} + "
            f"{PER_STEP_UPDATE}) B = {formula / 2**20:7.1f} MiB | stacked "
            f"Transition {result['transition_bytes'] / 2**20:7.1f} MiB | XLA scratch "
            f"for one iteration {result['temp_bytes'] / 2**20:7.1f} MiB"
        )
        if args.run:
            line += (
                f" | peak RSS {result['peak_rss_bytes'] / 2**20:7.1f} MiB "
                f"(iteration {result['run_seconds']:.0f} s)"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
