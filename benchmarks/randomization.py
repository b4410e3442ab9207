"""Domain randomization against Brax's PPO (issue 33): the same MuJoCo Playground
task, the same randomization function and the same settings on both sides.

Playground's `CartpoleBalance` with `randomize` (the pole's mass and the motor's
gear), Brax's `ppo.train` against `PPO.from_brax_hyperparameters`, `--pairs`
alternating rounds; both final greedy policies scored by `eqxrl.training.evaluate`.
`--networks small` gives both sides `(64, 64)` networks. README: "Domain
randomization against Brax's PPO".

    .venv-brax/bin/python benchmarks/randomization.py --quick      # a smoke run
    .venv-brax/bin/python benchmarks/randomization.py --pairs 4    # the figure
"""

import functools
import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
from _harness import alternate, command_line, greedy_return, lowered_program

try:
    from brax.training.agents.ppo import networks as ppo_networks
    from mujoco_playground import registry, wrapper
except ImportError:
    raise SystemExit(
        "this benchmark needs Brax and MuJoCo Playground: run it with "
        ".venv-brax/bin/python"
    ) from None

from brax_trainers import brax_program, provide_device_put_replicated

import eqxrl
from eqxrl.envs import TimeLimit, brax_randomization, from_brax

TASK = "CartpoleBalance"

# Settings a CPU trains CartpoleBalance with in about 2M steps: 64 environments,
# unrolls of 256 steps (one training step is one unroll of every environment),
# 32 minibatches, 10 passes (eqxrl's PPO: 64 x 256, 10 epochs x 32 minibatches).
# fmt: off
SETTINGS = dict(
    num_timesteps=2_000_000, num_evals=6, episode_length=1000, num_envs=64,
    batch_size=2, num_minibatches=32, unroll_length=256, num_updates_per_batch=10,
    learning_rate=3e-4, discounting=0.995, gae_lambda=0.95, entropy_cost=1e-3,
    normalize_observations=True, reward_scaling=0.1, clipping_epsilon=0.2,
    action_repeat=1, num_eval_envs=16,
)
QUICK = dict(
    num_timesteps=4 * 16 * 32, num_evals=4, episode_length=100, num_envs=16,
    batch_size=4, num_minibatches=4, unroll_length=8, num_updates_per_batch=2,
    num_eval_envs=4,
)
# fmt: on


def randomize(model: Any, rng: jax.Array) -> tuple[Any, Any]:
    """Playground's form of a randomization function: per key of `rng`, the pole's
    mass scaled by U(0.5, 2) and the motor's gear by U(0.8, 1.2)."""

    @jax.vmap
    def draw(rng):
        mass_key, gear_key = jr.split(rng)
        body_mass = model.body_mass.at[2].multiply(
            jr.uniform(mass_key, (), minval=0.5, maxval=2.0)
        )
        actuator_gear = model.actuator_gear.at[0, 0].multiply(
            jr.uniform(gear_key, (), minval=0.8, maxval=1.2)
        )
        return body_mass, actuator_gear

    body_mass, actuator_gear = draw(rng)
    in_axes = jax.tree.map(lambda _: None, model).tree_replace(
        {"body_mass": 0, "actuator_gear": 0}
    )
    batched = model.tree_replace(
        {"body_mass": body_mass, "actuator_gear": actuator_gear}
    )
    return batched, in_axes


class BraxPolicy(eqxrl.nn.AbstractPolicy):
    """Brax's trained greedy policy (its normalizer included) as an eqxrl policy,
    so that one evaluator scores both sides."""

    params: Any
    make_policy: Any = eqx.field(static=True)

    def __call__(self, observation, key, action_mask=None):
        act = self.make_policy(self.params, deterministic=True)
        action, _ = act(observation[None], key)
        return action[0]


def main() -> None:
    args = command_line(
        __doc__,
        pairs={"type": int, "help": "rounds (default 4)"},
        eval_episodes={"type": int, "help": "(64)"},
        quick={"action": "store_true", "help": "toy sizes, one round: a smoke run"},
        networks={
            "choices": ("brax", "small"),
            "default": "brax",
            "help": "Brax's PPO networks, or (64, 64) on both sides",
        },
        out={"type": Path, "help": "write a JSON here"},
    ).parse_args()
    pairs = args.pairs or (1 if args.quick else 4)
    episodes = args.eval_episodes or (4 if args.quick else 64)
    settings = {**SETTINGS, **(QUICK if args.quick else {})}
    provide_device_put_replicated()  # Brax's trainer on jax >= 0.10
    if args.networks == "small":
        settings["network_factory"] = functools.partial(
            ppo_networks.make_ppo_networks,
            policy_hidden_layer_sizes=(64, 64),
            value_hidden_layer_sizes=(64, 64),
        )
    warnings.filterwarnings("ignore", category=DeprecationWarning)

    env = registry.load(TASK, config_overrides={"impl": "jax"})
    ppo = eqxrl.PPO.from_brax_hyperparameters(
        from_brax(env), randomization_fn=randomize, **settings
    )
    eval_env = brax_randomization(
        TimeLimit(from_brax(env), settings["episode_length"]), randomize
    )

    def held_out(policy, seed: int) -> dict:  # both sides, one evaluator
        return {"return": greedy_return(policy, eval_env, seed, episodes)}

    ours = lowered_program(
        ppo,
        facts=lambda out, seed: held_out(ppo.policy(out[0], deterministic=True), seed),
    )
    steps = ours.work
    print(
        f"jax {jax.__version__}, eqxrl {eqxrl.__version__}; {TASK}, {steps:,} steps "
        f"per run, {args.networks} networks; eqxrl compiled in "
        f"{ours.compile_seconds:.1f} s",
        flush=True,
    )
    theirs = brax_program(
        "ppo", env, settings, randomization_fn=randomize,
        wrap_env_fn=wrapper.wrap_for_brax_training,
    )  # fmt: skip
    theirs.work = steps
    theirs.facts = lambda out, seed: {
        **held_out(BraxPolicy(out["params"], out["make_policy"]), seed),
        "compile_seconds": out["compile_seconds"],
        "steps": out["steps"],
    }
    programs = {"eqxrl": ours, "Brax": theirs}
    result = alternate(programs, pairs, warmup=(), first_seed=0)
    if any(f["steps"] != steps for f in result.facts["Brax"]):
        raise RuntimeError(f"Brax ran other than eqxrl's {steps:,} steps")
    ratios = result.ratios("eqxrl", "Brax")
    returns = {name: result.fact(name, "return") for name in programs}
    summary = dict(
        task=TASK,
        networks=args.networks,
        settings={k: str(v) for k, v in settings.items()},
        steps=steps,
        eval_episodes=episodes,
        eqxrl_compile_seconds=ours.compile_seconds,
        median_ratio=statistics.median(ratios),
        best_ratio=max(ratios),
        eqxrl_returns=returns["eqxrl"],
        brax_returns=returns["Brax"],
        steps_per_second={name: result.rates(name) for name in programs},
        brax_compile_seconds=result.fact("Brax", "compile_seconds"),
    )
    print(
        f"steps/s ratio median {summary['median_ratio']:.2f}x (best "
        f"{summary['best_ratio']:.2f}x); held-out return eqxrl "
        f"{np.mean(returns['eqxrl']):.1f} (min {min(returns['eqxrl']):.1f}), Brax "
        f"{np.mean(returns['Brax']):.1f} (min {min(returns['Brax']):.1f})"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=2, default=float))


if __name__ == "__main__":
    # Playground's environments broadcast arrays of different ranks (the test
    # suite runs benchmarks with rank promotion raising).
    with jax.numpy_rank_promotion("allow"):
        main()
