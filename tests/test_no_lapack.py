"""No program eqxrl compiles by default holds a LAPACK call.

On the CPU, JAX lowers `jnp.linalg` factorizations (QR for orthogonal initialization)
to LAPACK custom calls; vmapped, such a call waits for sub-tasks on the thread pool
it occupies and can hang forever on a small machine (seen on 2 cores: a vmapped
`ppo.train` over 4 seeds, stuck in `lapack_sgeqrf_ffi`). Each algorithm's default
networks are checked here: `train` vmapped over 4 keys, lowered for this machine's
CPU (the custom calls are chosen at lowering: XLA adds none when compiling), and
`init`, lowered and compiled, must not call LAPACK."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import pytest

import eqxrl
from eqxrl.envs import (
    AbstractWrapper,
    Box,
    Dict,
    RescaleAction,
    TimeLimit,
    TreasureHunt,
)
from eqxrl.multiagent import Independent

# optax's Adam raises a float to an int32 count (see conftest.py).
STANDARD_DTYPE_PROMOTION = True


class SplitObservation(AbstractWrapper):
    """CartPole observing a dict: the cart's and the pole's halves."""

    env: eqxrl.envs.AbstractEnvironment

    def _split(self, timestep):
        observation = timestep.observation
        halves = {"cart": observation[:2], "pole": observation[2:]}
        return eqx.tree_at(lambda t: t.observation, timestep, halves)

    def reset(self, key):
        state, timestep = self.env.reset(key)
        return state, self._split(timestep)

    def step(self, state, action, key):
        state, timestep = self.env.step(state, action, key)
        return state, self._split(timestep)

    @property
    def observation_space(self):
        half = Box(-jnp.inf, jnp.inf, (2,))
        return Dict(cart=half, pole=half)


PPO_SMALL = dict(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2)
OFF_POLICY_SMALL = dict(
    num_envs=4,
    train_frequency=2,
    batch_size=16,
    buffer_size=256,
    learning_starts=32,
    total_timesteps=80,
)
WORLD = TimeLimit(TreasureHunt(height=7, width=7, vision_radius=1, num_frames=2), 100)


NAMES = [
    "PPO masked",
    "PPO Gaussian",
    "PPO squashed",
    "PPO multi-input",
    "DQN",
    "IQN",
    "SAC",
    "Independent PPO",
    "Independent IQN",
]


def algorithms():
    cartpole = eqxrl.envs.make("CartPole-v1")
    pendulum = eqxrl.envs.make("Pendulum-v1")
    return {
        "PPO masked": eqxrl.PPO(env=eqxrl.envs.make("GridMaze-v0"), **PPO_SMALL),
        "PPO Gaussian": eqxrl.PPO(env=pendulum, **PPO_SMALL),
        "PPO squashed": eqxrl.PPO(
            env=RescaleAction(pendulum), squash_actions=True, **PPO_SMALL
        ),
        "PPO multi-input": eqxrl.PPO(
            env=SplitObservation(cartpole),
            actor_keys=("pole",),
            critic_keys=("cart", "pole"),
            **PPO_SMALL,
        ),
        "DQN": eqxrl.DQN(env=cartpole, **OFF_POLICY_SMALL),
        "IQN": eqxrl.IQN(env=cartpole, **OFF_POLICY_SMALL),
        "SAC": eqxrl.SAC(env=pendulum, **OFF_POLICY_SMALL),
        "Independent PPO": Independent(eqxrl.PPO(env=WORLD, **PPO_SMALL)),
        "Independent IQN": Independent(eqxrl.IQN(env=WORLD, **OFF_POLICY_SMALL)),
    }


def lapack_calls(program_text: str) -> list[str]:
    """The LAPACK custom calls of a program's text, lowered (StableHLO:
    `custom_call @lapack_sgeqrf_ffi`) or compiled (HLO:
    `custom_call_target="lapack_sgeqrf_ffi"`)."""
    return re.findall(
        r'(?:custom_call @|custom_call_target=")(\w*lapack\w*)', program_text, re.I
    )


def test_the_check_sees_a_lapack_call():
    """The check below can fail: a vmapped QR lowers and compiles to a LAPACK
    call."""
    lowered = eqx.filter_jit(jax.vmap(jnp.linalg.qr)).lower(jnp.ones((4, 3, 3)))
    assert "lapack_sgeqrf_ffi" in lapack_calls(lowered.as_text())
    assert "lapack_sgeqrf_ffi" in lapack_calls(lowered.compile().compiled.as_text())


def test_every_algorithm_is_checked():
    assert sorted(algorithms()) == sorted(NAMES)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_programs_hold_no_lapack_call(name):
    algorithm = algorithms()[name]
    keys = jr.split(jr.key(0), 4)
    train = eqx.filter_jit(eqx.filter_vmap(algorithm.train)).lower(keys)
    assert lapack_calls(train.as_text()) == [], name
    init = eqx.filter_jit(algorithm.init).lower(keys[0])
    assert lapack_calls(init.as_text()) == [], name
    assert lapack_calls(init.compile().compiled.as_text()) == [], name
