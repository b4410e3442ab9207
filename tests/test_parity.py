"""The port-parity checker: eqxrl's CartPole and Pendulum against gymnasium's pass,
and a deliberately wrong constant is found at the step where it starts to matter."""

import numpy as np
import pytest

import eqxrl
from eqxrl.envs import CartPole, Pendulum, TimeLimit, check_parity

gymnasium = pytest.importorskip("gymnasium")


def cartpole_reference():
    return gymnasium.make("CartPole-v1").unwrapped


def set_cartpole_state(reference, state):
    reference.state = np.asarray(state.env_state.physics, np.float64)


def test_cartpole_matches_gymnasium():
    report = check_parity(
        eqxrl.envs.make("CartPole-v1"),
        cartpole_reference(),
        set_state=set_cartpole_state,
        num_episodes=5,
        rtol=1e-4,
        atol=1e-5,
    )
    assert report.ok, report
    assert report.steps > 5 * 8  # random play: episodes of 10-40 steps
    assert set(report.fields) == {"observation", "reward", "terminated", "truncated"}
    assert report.fields["observation"].largest_difference < 1e-4


def test_pendulum_matches_gymnasium_step_by_step():
    def set_state(reference, state):
        inner = state.env_state
        reference.state = np.array([float(inner.theta), float(inner.theta_dot)])

    report = check_parity(
        eqxrl.envs.make("Pendulum-v1"),
        gymnasium.make("Pendulum-v1").unwrapped,
        set_state=set_state,
        sync_every_step=True,
        num_episodes=2,
        max_steps=100,
        rtol=1e-4,
        atol=1e-4,
    )
    assert report.ok, report
    assert report.steps == 200


def test_a_wrong_gravity_is_found_where_it_starts_to_matter():
    def push_right(rng, observation):
        return np.int32(1)

    report = check_parity(
        TimeLimit(CartPole(gravity=12.0), 500),
        cartpole_reference(),
        set_state=set_cartpole_state,
        policy=push_right,
        num_episodes=1,
        rtol=1e-4,
        atol=1e-5,
    )
    assert not report.ok
    # Gravity enters the angular acceleration: the first step's angular velocity
    # already differs (the angle follows a step later); rewards do not.
    assert report.fields["observation"].first_mismatch == (0, 1)
    assert report.fields["reward"].first_mismatch is None
    assert "MISMATCH" in str(report) and "episode 0, step 1" in str(report)


def test_a_pair_of_callables_and_a_clear_error_for_anything_else():
    reference = cartpole_reference()
    report = check_parity(
        eqxrl.envs.make("CartPole-v1"),
        (reference.reset, reference.step),
        set_state=lambda pair, state: set_cartpole_state(reference, state),
        num_episodes=1,
        rtol=1e-4,
        atol=1e-5,
    )
    assert report.ok, report
    with pytest.raises(TypeError, match="gymnasium-style environment"):
        check_parity(eqxrl.envs.make("CartPole-v1"), object())
    with pytest.raises(ValueError, match="observation of shape"):
        check_parity(Pendulum(), cartpole_reference(), num_episodes=1)
