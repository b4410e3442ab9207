"""Hashes of the StableHLO of existing configurations' compiled programs, to show that
a change leaves them as they were (the same program runs at the same speed).

    .venv/bin/python benchmarks/program_hashes.py --save before.json   # on the base
    .venv/bin/python benchmarks/program_hashes.py --compare before.json

`CONFIGS` lists what is hashed, with the evaluation program of a PPO policy. Hashes
depend on the jax version: compare on one venv. Every configuration is built even
with `--configs`.
"""

import hashlib
import json
import sys

import jax
import jax.random as jr
import numpy as np
from _harness import command_line

import eqxrl
from eqxrl.envs import make
from eqxrl.training import evaluate

TWO_ITERATIONS = 4 * 128 * 2


def _team_ppo(**options) -> eqxrl.PPO:
    return eqxrl.PPO(
        env=make("TreasureHunt-v0"),
        num_envs=4,
        num_steps=16,
        total_timesteps=128,
        **options,
    )


def _team_dqn(**options) -> eqxrl.DQN:
    return eqxrl.DQN(
        env=make("TreasureHunt-v0"),
        num_envs=4,
        train_frequency=4,
        total_timesteps=4 * 4 * 4,
        buffer_size=64,
        learning_starts=32,
        batch_size=16,
        n_step=1,
        **options,
    )


CONFIGS = {
    "ppo_cartpole": lambda: eqxrl.PPO(
        env=make("CartPole-v1"), total_timesteps=TWO_ITERATIONS
    ),
    "ppo_cartpole_normalized": lambda: eqxrl.PPO(
        env=make("CartPole-v1"),
        total_timesteps=TWO_ITERATIONS,
        normalize_observations=True,
        normalize_rewards=True,
    ),
    "ppo_pendulum": lambda: eqxrl.PPO(
        env=make("Pendulum-v1"), total_timesteps=TWO_ITERATIONS
    ),
    "ppo_pendulum_squashed": lambda: eqxrl.PPO(
        env=eqxrl.envs.RescaleAction(make("Pendulum-v1")),
        total_timesteps=TWO_ITERATIONS,
        squash_actions=True,
        state_dependent_std=True,
        std_parameterization="softplus",
    ),
    "ppo_snake": lambda: eqxrl.PPO(
        env=make("Snake-v0"), total_timesteps=TWO_ITERATIONS
    ),
    "ppo_grid_maze": lambda: eqxrl.PPO(
        env=make("GridMaze-v0"), total_timesteps=TWO_ITERATIONS
    ),
    "ippo_treasure_hunt": lambda: eqxrl.multiagent.Independent(
        eqxrl.PPO(
            env=make("TreasureHunt-v0"), num_envs=4, num_steps=16, total_timesteps=128
        )
    ),
    "ippo_treasure_hunt_shared": lambda: eqxrl.multiagent.Independent(
        eqxrl.PPO(
            env=make("TreasureHunt-v0"), num_envs=4, num_steps=16, total_timesteps=128
        ),
        share_parameters=True,
    ),
    "dqn_cartpole": lambda: eqxrl.DQN(env=make("CartPole-v1"), total_timesteps=20_000),
    "iqn_cartpole": lambda: eqxrl.IQN(env=make("CartPole-v1"), total_timesteps=20_000),
    "sac_pendulum": lambda: eqxrl.SAC(env=make("Pendulum-v1"), total_timesteps=20_000),
    "td3_pendulum": lambda: eqxrl.TD3(env=make("Pendulum-v1"), total_timesteps=20_000),
    "pqn_cartpole": lambda: eqxrl.PQN(
        env=make("CartPole-v1"), total_timesteps=2 * 32 * 64
    ),
    "ppo_gru_stateless_cartpole": lambda: eqxrl.PPO(
        env=make("StatelessCartPole-v1"),
        total_timesteps=TWO_ITERATIONS,
        network_factory=eqxrl.nn.GRUActorCritic.from_env,
    ),
    "mappo_treasure_hunt": lambda: eqxrl.multiagent.MAPPO(_team_ppo()),
    "mappo_gru_treasure_hunt_own_critics": lambda: eqxrl.multiagent.MAPPO(
        _team_ppo(network_factory=eqxrl.nn.GRUActorCritic.from_env),
        share_parameters=True,
        share_critic=False,
    ),
    "vdn_treasure_hunt": lambda: eqxrl.multiagent.VDN(_team_dqn()),
    "qmix_treasure_hunt": lambda: eqxrl.multiagent.QMIX(_team_dqn()),
    "qmix_gru_treasure_hunt": lambda: eqxrl.multiagent.QMIX(
        _team_dqn(network_factory=eqxrl.nn.GRUQNetwork.from_env)
    ),
    "pqn_gru_stateless_cartpole": lambda: eqxrl.PQN(
        env=eqxrl.envs.TimeLimit(make("StatelessCartPole-v1"), 20),
        num_envs=4,
        num_steps=8,
        total_timesteps=4 * 8 * 2,
        network_factory=eqxrl.nn.GRUQNetwork.from_env,
        num_minibatches=2,
    ),
    "pqn_vdn_treasure_hunt": lambda: eqxrl.multiagent.PQNVDN(
        eqxrl.PQN(
            env=make("TreasureHunt-v0"),
            num_envs=4,
            num_steps=8,
            total_timesteps=4 * 8 * 2,
            num_minibatches=2,
        )
    ),
    "idqn_treasure_hunt": lambda: eqxrl.multiagent.Independent(_team_dqn()),
    "amp_pendulum": lambda: _amp_pendulum(),
}


def _amp_pendulum() -> eqxrl.algorithms.AMP:
    time = np.linspace(0.0, 6.0, 33)
    motion = np.stack([np.cos(time), np.sin(time), 2.0 * np.cos(2.0 * time)], axis=-1)
    return eqxrl.algorithms.AMP(
        eqxrl.PPO(
            env=make("Pendulum-v1"), num_envs=4, num_steps=16, total_timesteps=128
        ),
        eqxrl.buffers.ReferenceMotion.from_trajectory(motion),
    )


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def hashes(names: list[str]) -> dict[str, str]:
    key = jr.key(0)
    found = {}
    for name, build in CONFIGS.items():
        algorithm = build()
        if name in names:
            found[name] = digest(algorithm.lower(key).as_text())
    ppo = CONFIGS["ppo_cartpole"]()
    policy = ppo.policy(ppo.init(key), deterministic=True)
    lowered = jax.jit(
        lambda key: evaluate(policy, ppo.env, key, num_episodes=4).returns
    )
    found["evaluate_ppo_cartpole"] = digest(lowered.lower(key).as_text())
    return found


def main() -> None:
    parser = command_line(
        __doc__,
        configs={
            "nargs": "+",
            "choices": list(CONFIGS),
            "default": list(CONFIGS),
            "metavar": "NAME",
            "help": "hash these configurations alone (default: all; the test suite's "
            "smoke run lowers one, the others' programs are built by their own tests)",
        },
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE")
    group.add_argument("--compare", metavar="FILE")
    arguments = parser.parse_args()
    found = hashes(arguments.configs)
    for name, value in found.items():
        print(f"{name:36s} {value}")
    print(f"{len(found)} programs hashed")
    if arguments.save:
        with open(arguments.save, "w") as file:
            json.dump({"jax": jax.__version__, "hashes": found}, file, indent=1)
        return
    with open(arguments.compare) as file:
        saved = json.load(file)
    if saved["jax"] != jax.__version__:
        sys.exit(f"saved with jax {saved['jax']}, running {jax.__version__}")
    changed = [n for n in found if saved["hashes"].get(n) != found[n]]
    print("changed:", changed or "none")
    sys.exit(1 if changed else 0)


if __name__ == "__main__":
    main()
