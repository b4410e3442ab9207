"""PPO on dict observations, with an asymmetric actor-critic.

    python examples/dict_observations_ppo.py --total-timesteps 200000

The policy reads noisy sensors (`observation["sensors"]`); the critic, used only in
training, reads the simulator's true state (`observation["true_state"]`), as
MuJoCo Playground's `state` / `privileged_state` split does. PPO's default network
for a `Dict` observation space is `eqxrl.nn.MultiInputActorCritic`; `actor_keys`
and `critic_keys` choose what each part reads. The script trains both the
asymmetric critic and a critic that reads the sensors too, on the same seeds, and
prints both learning curves' ends.
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxrl
from eqxrl.envs import AbstractEnvironment, AbstractWrapper, Dict


class NoisySensors(AbstractWrapper):
    """Any environment with `Box` observations, seen through noisy sensors:
    `{"sensors": observation + noise, "true_state": observation}`."""

    env: AbstractEnvironment
    noise: float

    def _observe(self, timestep, key):
        true_state = timestep.observation
        sensors = true_state + self.noise * jr.normal(key, true_state.shape)
        observation = {"sensors": sensors, "true_state": true_state}
        return eqx.tree_at(lambda t: t.observation, timestep, observation)

    def reset(self, key):
        reset_key, noise_key = jr.split(key)
        state, timestep = self.env.reset(reset_key)
        return state, self._observe(timestep, noise_key)

    def step(self, state, action, key):
        step_key, noise_key = jr.split(key)
        state, timestep = self.env.step(state, action, step_key)
        return state, self._observe(timestep, noise_key)

    @property
    def observation_space(self) -> Dict:
        box = self.env.observation_space
        return Dict(sensors=box, true_state=box)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=200_000)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    env = NoisySensors(eqxrl.envs.make("CartPole-v1"), args.noise)
    keys = jr.split(jr.key(args.seed), args.seeds)
    for label, critic_keys in (
        ("critic reads the true state", ("true_state",)),
        ("critic reads the sensors", ("sensors",)),
    ):
        ppo = eqxrl.PPO(
            env=env,
            num_envs=8,
            num_steps=128,
            total_timesteps=args.total_timesteps,
            learning_rate=1e-3,
            actor_keys=("sensors",),
            critic_keys=critic_keys,
        )
        states, metrics = eqx.filter_jit(eqx.filter_vmap(ppo.train))(keys)
        returns = np.asarray(metrics["episode_return"])
        last = np.nanmean(returns[:, -5:], axis=1)
        print(
            f"{label}: return first {np.nanmean(returns[:, :3]):.1f}, "
            f"last per seed {np.array2string(last, precision=1)}"
        )

    # The trained policy takes the whole dict and reads only the sensors.
    state = jax.tree.map(lambda leaf: leaf[0], states)
    policy = ppo.policy(state, deterministic=True)
    observation = env.observation_space.sample(jr.key(1))
    action = policy.act(observation, jr.key(2))
    moved = {**observation, "true_state": observation["true_state"] + 1.0}
    same = bool(jnp.array_equal(action, policy.act(moved, jr.key(2))))
    print(f"policy ignores the true state: {same}")


if __name__ == "__main__":
    main()
