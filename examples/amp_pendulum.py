"""Adversarial Motion Priors on Pendulum-v1: no task reward, only the style of a
reference swing.

    python examples/amp_pendulum.py --total-timesteps 300000 --seeds 4

The reference is a pendulum swinging about its lowest point with a fixed amplitude,
simulated in NumPy with Pendulum-v1's own dynamics under an energy-keeping controller
and saved to (and loaded from) a `.npz` file. AMP trains PPO on the discriminator's
style reward alone (`task_weight=0`). Before and after training it prints how far
the policy's states are from the reference's: the 1-D Wasserstein distances of the
angle (from the lowest point) and of the angular velocity, each divided by the
reference's standard deviation, and their mean.
"""

import argparse
import os
import tempfile
import time

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

import eqxrl
from eqxrl.algorithms import AMP
from eqxrl.buffers import ReferenceMotion

# Pendulum-v1's dynamics (gymnasium's): angle 0 upright, pi hanging down.
GRAVITY, MASS, LENGTH, TIME_STEP, MAX_SPEED, MAX_TORQUE = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0


def reference_swing(amplitude: float = 1.0, num_steps: int = 2000) -> np.ndarray:
    """Observations `[cos theta, sin theta, theta_dot]` of a pendulum swinging about
    its lowest point with `amplitude` radians, `[num_steps, 3]`: Pendulum-v1's
    update, with a torque that holds the swing's energy (the explicit update
    would otherwise let it drift)."""
    stiffness = 3.0 * GRAVITY / (2.0 * LENGTH)

    def energy(phi: float, phi_dot: float) -> float:  # phi: angle from the bottom
        return 0.5 * phi_dot**2 + stiffness * (1.0 - np.cos(phi))

    target = energy(amplitude, 0.0)
    theta, theta_dot = np.pi + amplitude, 0.0
    observations = []
    for _ in range(num_steps):
        observations.append([np.cos(theta), np.sin(theta), theta_dot])
        phi = theta - np.pi
        torque = np.clip(
            2.0 * (target - energy(phi, theta_dot)) * np.sign(theta_dot),
            -MAX_TORQUE,
            MAX_TORQUE,
        )
        theta_dot = theta_dot + TIME_STEP * (
            stiffness * np.sin(theta) + 3.0 / (MASS * LENGTH**2) * torque
        )
        theta_dot = float(np.clip(theta_dot, -MAX_SPEED, MAX_SPEED))
        theta = theta + TIME_STEP * theta_dot
    return np.asarray(observations, np.float32)


def angle_and_velocity(observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The angle from the lowest point, in `(-pi, pi]`, and the angular velocity."""
    phi = np.arctan2(-observations[..., 1], -observations[..., 0])
    return phi.reshape(-1), observations[..., 2].reshape(-1)


def wasserstein_1d(a: np.ndarray, b: np.ndarray) -> float:
    """The 1-D Wasserstein-1 distance of two samples (through their quantiles)."""
    quantiles = np.linspace(0.0, 1.0, 1001)
    return float(np.mean(np.abs(np.quantile(a, quantiles) - np.quantile(b, quantiles))))


def distance(observations: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """How far a set of observations is from the reference's, per coordinate and
    (their mean, each divided by the reference's standard deviation) overall."""
    phi, phi_dot = angle_and_velocity(observations)
    reference_phi, reference_phi_dot = angle_and_velocity(reference)
    angle = wasserstein_1d(phi, reference_phi)
    velocity = wasserstein_1d(phi_dot, reference_phi_dot)
    return {
        "angle": angle,
        "velocity": velocity,
        "distance": 0.5
        * (angle / reference_phi.std() + velocity / reference_phi_dot.std()),
    }


@eqx.filter_jit
def rollout_observations(
    amp: AMP, state, key, num_episodes: int = 16, num_steps: int = 200
) -> jax.Array:
    """The observations of `num_episodes` episodes of the (sampling) policy,
    `[num_episodes, num_steps, 3]`, each from one of Pendulum-v1's random starts."""
    env = amp.env
    policy = amp.policy(state)

    def episode(key):
        reset_key, key = jr.split(key)
        env_state, timestep = env.reset(reset_key)

        def step(carry, key):
            env_state, timestep = carry
            action_key, step_key = jr.split(key)
            action = policy(timestep.observation, action_key)
            env_state, next_timestep = env.step(env_state, action, step_key)
            return (env_state, next_timestep), timestep.observation

        _, observations = jax.lax.scan(
            step, (env_state, timestep), jr.split(key, num_steps)
        )
        return observations

    return jax.vmap(episode)(jr.split(key, num_episodes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-timesteps", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--amplitude", type=float, default=1.0)
    args = parser.parse_args()

    trajectory = reference_swing(args.amplitude)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "swing.npz")
        np.savez(path, trajectory=trajectory)
        reference = ReferenceMotion.from_npz(path, observation_size=3)

    amp = AMP(
        eqxrl.PPO(
            env=eqxrl.envs.make("Pendulum-v1"),
            num_envs=16,
            num_steps=128,
            num_epochs=10,
            num_minibatches=16,
            learning_rate=1e-3,
            gamma=0.95,
            gae_lambda=0.95,
            ent_coef=0.0,
            total_timesteps=args.total_timesteps,
            normalize_observations=True,
        ),
        reference,
        task_weight=0.0,
        style_weight=1.0,
        discriminator_hidden_sizes=(64, 64),
        discriminator_learning_rate=1e-3,
        discriminator_epochs=2,
        discriminator_minibatches=8,
    )
    keys = jr.split(jr.key(0), args.seeds)
    untrained = eqx.filter_vmap(amp.init)(keys)
    start = time.perf_counter()
    trained, metrics = eqx.filter_vmap(amp.train)(keys)
    seconds = time.perf_counter() - start
    print(
        f"{args.seeds} seeds x {amp.ppo.total_timesteps:,} steps in {seconds:.0f} s "
        "(incl. compile)"
    )
    for name in (
        "amp_style_reward",
        "amp_reference_accuracy",
        "amp_policy_accuracy",
        "amp_discriminator_loss",
    ):
        values = np.asarray(metrics[name]).mean(axis=0)
        print(f"{name:>24}: first {values[0]:.3f}, last {values[-1]:.3f}")

    evaluate_keys = jr.split(jr.key(1), args.seeds)
    print("seed  distance before -> after   (angle, velocity W1 after)")
    ratios = []
    for seed in range(args.seeds):

        def member(states, seed=seed):
            return jax.tree.map(lambda x: x[seed] if eqx.is_array(x) else x, states)

        before = distance(
            np.asarray(
                rollout_observations(amp, member(untrained), evaluate_keys[seed])
            ),
            trajectory,
        )
        after = distance(
            np.asarray(rollout_observations(amp, member(trained), evaluate_keys[seed])),
            trajectory,
        )
        ratios.append(before["distance"] / after["distance"])
        print(
            f"{seed:>4}  {before['distance']:.3f} -> {after['distance']:.3f} "
            f"({ratios[-1]:.1f}x)   ({after['angle']:.3f} rad, "
            f"{after['velocity']:.3f} rad/s)"
        )
    print(f"distance falls {min(ratios):.1f}x at least, {np.mean(ratios):.1f}x mean")


if __name__ == "__main__":
    main()
