"""Adversarial Motion Priors (Peng et al. 2021) on top of PPO."""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import optax
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from .._config import in_range
from .._random import split
from ..buffers import ReferenceMotion
from ..nn import AbstractPolicy
from ._base import AbstractAlgorithm
from ._epochs import minibatch_epochs
from ._observation_storage import restore_observation
from ._ppo import PPO, PPOState


class AMPDiscriminator(eqx.Module):
    """The discriminator of [`AMP`][eqxrl.algorithms.AMP]: an MLP (ReLU hidden
    layers, one linear output) on a transition's observation and next observation,
    concatenated. Trained towards `+1` on reference transitions and `-1` on the
    policy's (least squares).

    **Arguments:**

    - `layers`: the linear layers, the last with a scalar output.
    """

    layers: tuple[eqx.nn.Linear, ...]

    @classmethod
    def make(
        cls,
        observation_size: int,
        hidden_sizes: tuple[int, ...],
        key: PRNGKeyArray,
    ) -> "AMPDiscriminator":
        """A freshly initialized discriminator (Equinox's default initialization).

        **Arguments:**

        - `observation_size`: the size of one observation; the input is twice it.
        - `hidden_sizes`: the hidden layers' widths.
        - `key`: the PRNG key of the initialization.
        """
        sizes = (2 * observation_size, *hidden_sizes)
        keys = jr.split(key, len(sizes))
        layers = [
            eqx.nn.Linear(sizes[i], sizes[i + 1], key=keys[i])
            for i in range(len(sizes) - 1)
        ]
        layers.append(eqx.nn.Linear(sizes[-1], "scalar", key=keys[-1]))
        return cls(layers=tuple(layers))

    def __call__(
        self,
        observation: Float[Array, " dim"],
        next_observation: Float[Array, " dim"],
    ) -> Float[Array, ""]:
        """The score of one transition (high: like the reference)."""
        return self.score(jnp.concatenate([observation, next_observation]))

    def score(self, features: Float[Array, " features"]) -> Float[Array, ""]:
        """The score of one transition's concatenated features."""
        x = features
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


class AMPState(eqx.Module):
    """The training state of [`AMP`][eqxrl.algorithms.AMP].

    **Arguments:**

    - `ppo`: the PPO learner's state (policy, optimizer, environments, key).
    - `discriminator`: the discriminator.
    - `discriminator_optimizer_state`: its Adam state.
    - `key`: the PRNG key of the discriminator's updates.
    """

    ppo: PPOState
    discriminator: AMPDiscriminator
    discriminator_optimizer_state: PyTree
    key: PRNGKeyArray


def style_reward(score: Float[Array, "*batch"]) -> Float[Array, "*batch"]:
    """AMP's style reward of a discriminator score `d`:
    `max(0, 1 - 0.25 (d - 1)^2)`, in `[0, 1]`, `1` where `d = 1` (the reference's
    target)."""
    return jnp.maximum(0.0, 1.0 - 0.25 * jnp.square(score - 1.0))


def discriminator_loss(
    discriminator: AMPDiscriminator,
    reference: Float[Array, "batch features"],
    policy: Float[Array, "batch features"],
    gradient_penalty: Float[Array, ""],
) -> tuple[Float[Array, ""], dict[str, Array]]:
    """AMP's least-squares discriminator loss with its gradient penalty:
    `E_ref[(D - 1)^2] + E_policy[(D + 1)^2] + (gradient_penalty / 2)
    E_ref[|grad_x D(x)|^2]`, `x` the concatenated transition.

    **Arguments:**

    - `discriminator`: the discriminator.
    - `reference`, `policy`: concatenated `(observation, next_observation)` of
      reference and policy transitions.
    - `gradient_penalty`: the penalty's weight (`10` in the paper).

    **Returns:**

    `(loss, statistics)`: the statistics are `amp_discriminator_loss` (the loss),
    `amp_gradient_penalty` (`E_ref[|grad D|^2]`, unweighted),
    `amp_reference_accuracy` (fraction of reference transitions with `D > 0`) and
    `amp_policy_accuracy` (fraction of policy transitions with `D < 0`).
    """
    score_and_gradient = jax.vmap(jax.value_and_grad(discriminator.score))
    reference_score, reference_gradient = score_and_gradient(reference)
    policy_score = jax.vmap(discriminator.score)(policy)
    penalty = jnp.mean(jnp.sum(jnp.square(reference_gradient), axis=-1))
    loss = (
        jnp.mean(jnp.square(reference_score - 1.0))
        + jnp.mean(jnp.square(policy_score + 1.0))
        + 0.5 * gradient_penalty * penalty
    )
    statistics = {
        "amp_discriminator_loss": loss,
        "amp_gradient_penalty": penalty,
        "amp_reference_accuracy": jnp.mean((reference_score > 0).astype(jnp.float32)),
        "amp_policy_accuracy": jnp.mean((policy_score < 0).astype(jnp.float32)),
    }
    return loss, statistics


class AMP(AbstractAlgorithm[AMPState]):
    """Adversarial Motion Priors ([Peng et al. 2021](https://arxiv.org/abs/2104.02180))
    as a [`PPO`][eqxrl.PPO] option: a discriminator learns to tell the policy's
    state transitions from a reference motion's, and its style reward, mixed with
    the task reward, is what PPO learns from.

    One iteration, in one compiled program: PPO's rollout (every transition's
    observation and the observation it led to, before any reset); the rewards
    replaced by `task_weight * reward + style_weight * style_reward(D(s, s'))`
    with the discriminator as it was before the iteration; PPO's update on them
    (GAE, epochs, minibatches as configured on `ppo`); then `discriminator_epochs`
    passes of `discriminator_minibatches` Adam steps of
    [`discriminator_loss`][eqxrl.algorithms.discriminator_loss], each on a
    minibatch of the rollout's transitions against as many reference transitions
    drawn from `reference`.

    The environment's observations must be flat arrays (`[dim]`), laid out as the
    reference's; the discriminator reads them unnormalized. Episode metrics
    (`episode_return`) stay those of the task reward.

    **Arguments:**

    - `ppo`: the PPO learner (its environment, network, rollout and update
      settings).
    - `reference`: the reference transitions.
    - `task_weight`, `style_weight`: the weights of the environment's reward and of
      the style reward (`0.5` each by default, as in the paper; `task_weight=0`
      imitates the reference's style alone).
    - `discriminator_hidden_sizes`: the discriminator's hidden layers.
    - `discriminator_learning_rate`: its Adam step size.
    - `gradient_penalty`: the weight of the gradient penalty on reference
      transitions (`10` in the paper).
    - `discriminator_epochs`, `discriminator_minibatches`: passes over each rollout
      and minibatches per pass of the discriminator's updates.

    !!! example

        ```python
        reference = eqxrl.buffers.ReferenceMotion.from_npz("swing.npz")
        amp = eqxrl.algorithms.AMP(
            eqxrl.PPO(env=eqxrl.envs.make("Pendulum-v1")), reference, task_weight=0.0
        )
        state, metrics = amp.train(jax.random.key(0))
        metrics["amp_reference_accuracy"], metrics["amp_policy_accuracy"]
        ```
    """

    ppo: PPO
    reference: ReferenceMotion
    task_weight: Float[Array, ""] = eqx.field(
        default=0.5, converter=in_range("task_weight", 0.0, math.inf, finite=True)
    )
    style_weight: Float[Array, ""] = eqx.field(
        default=0.5, converter=in_range("style_weight", 0.0, math.inf, finite=True)
    )
    discriminator_hidden_sizes: tuple[int, ...] = eqx.field(
        static=True, default=(128, 128), converter=tuple
    )
    discriminator_learning_rate: Float[Array, ""] = eqx.field(
        default=1e-4,
        converter=in_range("discriminator_learning_rate", 0.0, math.inf, finite=True),
    )
    gradient_penalty: Float[Array, ""] = eqx.field(
        default=10.0, converter=in_range("gradient_penalty", 0.0, math.inf, finite=True)
    )
    discriminator_epochs: int = eqx.field(static=True, default=2)
    discriminator_minibatches: int = eqx.field(static=True, default=4)

    def __check_init__(self):
        for name in ("discriminator_epochs", "discriminator_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"AMP: {name} must be at least 1; got {getattr(self, name)}."
                )
        if self.ppo.steps_per_iteration % self.discriminator_minibatches:
            raise ValueError(
                f"AMP: discriminator_minibatches={self.discriminator_minibatches} "
                "must divide the rollout's num_envs * num_steps = "
                f"{self.ppo.steps_per_iteration}."
            )
        _, timestep = jax.eval_shape(self.ppo.env.reset, jr.key(0))
        observation = timestep.observation
        if not isinstance(observation, jax.ShapeDtypeStruct) or observation.ndim != 1:
            raise ValueError(
                "AMP: the discriminator reads flat observations ([dim] arrays); "
                f"the environment's are {observation}. Wrap it in "
                "eqxrl.envs.FlattenObservation."
            )
        if observation.shape[0] != self.reference.observation_size:
            raise ValueError(
                f"AMP: the reference's observations have size "
                f"{self.reference.observation_size}, the environment's "
                f"{observation.shape[0]}; they must match."
            )

    @property
    def env(self):
        """The environment, `ppo`'s."""
        return self.ppo.env

    @property
    def num_iterations(self) -> int:
        """`ppo`'s number of iterations."""
        return self.ppo.num_iterations

    @property
    def steps_per_iteration(self) -> int:
        """`ppo`'s environment steps per iteration."""
        return self.ppo.steps_per_iteration

    @property
    def compiler_options(self) -> dict[str, Any]:
        """`ppo`'s compiler options."""
        return self.ppo.compiler_options

    def make_discriminator_optimizer(self) -> optax.GradientTransformation:
        """Adam with `discriminator_learning_rate`."""
        return optax.adam(self.discriminator_learning_rate)

    def init(self, key: PRNGKeyArray) -> AMPState:
        """PPO's initial state, a fresh discriminator and its optimizer state."""
        ppo_key, discriminator_key, key = split(key, 3)
        discriminator = AMPDiscriminator.make(
            self.reference.observation_size,
            self.discriminator_hidden_sizes,
            discriminator_key,
        )
        optimizer_state = self.make_discriminator_optimizer().init(
            eqx.filter(discriminator, eqx.is_inexact_array)
        )
        return AMPState(
            ppo=self.ppo.init(ppo_key),
            discriminator=discriminator,
            discriminator_optimizer_state=optimizer_state,
            key=key,
        )

    def policy(self, state: AMPState, deterministic: bool = False) -> AbstractPolicy:
        """`ppo`'s policy of `state.ppo`."""
        return self.ppo.policy(state.ppo, deterministic)

    def environment_axes(self, state: AMPState) -> PyTree[int]:
        """`ppo`'s for `state.ppo`; the discriminator, its optimizer state and the
        key are held whole."""
        axes = jtu.tree_map(lambda _: -1, state)
        return eqx.tree_at(
            lambda tree: tree.ppo, axes, self.ppo.environment_axes(state.ppo)
        )

    def style_rewards(
        self,
        discriminator: AMPDiscriminator,
        observation: Float[Array, "*batch dim"],
        next_observation: Float[Array, "*batch dim"],
    ) -> Float[Array, "*batch"]:
        """[`style_reward`][eqxrl.algorithms.style_reward] of the discriminator's
        scores of transitions (any leading axes)."""
        batch_shape = observation.shape[:-1]
        features = jnp.concatenate([observation, next_observation], axis=-1)
        flat = features.reshape(-1, features.shape[-1])
        scores = jax.vmap(discriminator.score)(flat.astype(jnp.float32))
        return style_reward(scores).reshape(batch_shape)

    def train_iteration(self, state: AMPState) -> tuple[AMPState, dict[str, Array]]:
        """PPO's rollout, PPO's update on the mixed reward, then the
        discriminator's updates.

        **Returns:**

        `(state, metrics)`: PPO's metrics (see
        [`PPO.train_iteration`][eqxrl.PPO.train_iteration]; the episode returns
        are the task reward's) and `amp_style_reward` (the mean style reward of
        the rollout), `amp_discriminator_loss`, `amp_gradient_penalty`,
        `amp_reference_accuracy` and `amp_policy_accuracy` (see
        [`discriminator_loss`][eqxrl.algorithms.discriminator_loss]; means over the
        iteration's discriminator minibatches, each measured before its step).
        Accuracies near 0.5 mean the discriminator no longer separates the
        policy's transitions from the reference's.
        """
        ppo = self.ppo
        ppo_state = state.ppo
        key, collect_key, update_key = split(ppo_state.key, 3)
        ppo_state, transitions, truncation_values, segment_carry = ppo.rollout(
            ppo_state, collect_key, next_observation=True
        )
        ppo_state = eqx.tree_at(lambda s: s.key, ppo_state, key)
        observation = restore_observation(
            transitions.observation, ppo.env, ppo.observation_storage_dtype
        )
        # Both halves of every transition, the policy's and the reference's, at
        # the precision the rollout stores observations in
        # (`observation_storage_dtype`): else the discriminator could tell them
        # apart by their rounding alone.
        next_observation = self._as_stored(transitions.extras["next_observation"])
        styles = self.style_rewards(state.discriminator, observation, next_observation)
        rewards = self.task_weight * transitions.reward + self.style_weight * styles
        transitions = eqx.tree_at(lambda t: t.reward, transitions, rewards)
        ppo_state, metrics = ppo.learn(
            ppo_state, transitions, truncation_values, update_key, segment_carry
        )
        discriminator_key, key = split(state.key)
        discriminator, optimizer_state, statistics = self._update_discriminator(
            state.discriminator,
            state.discriminator_optimizer_state,
            observation,
            next_observation,
            discriminator_key,
        )
        metrics = {**metrics, "amp_style_reward": jnp.mean(styles), **statistics}
        state = AMPState(
            ppo=ppo_state,
            discriminator=discriminator,
            discriminator_optimizer_state=optimizer_state,
            key=key,
        )
        return state, metrics

    def _as_stored(self, observation: PyTree[Array]) -> PyTree[Array]:
        """Observations rounded to the rollout's `observation_storage_dtype`, as
        float32 (unchanged without one)."""
        ppo = self.ppo
        if ppo.observation_storage_dtype is None:
            return observation
        return jtu.tree_map(
            lambda x: x.astype(ppo.observation_storage_dtype).astype(jnp.float32),
            observation,
        )

    def _update_discriminator(
        self,
        discriminator: AMPDiscriminator,
        optimizer_state: PyTree,
        observation: Float[Array, "num_steps num_envs dim"],
        next_observation: Float[Array, "num_steps num_envs dim"],
        key: PRNGKeyArray,
    ) -> tuple[AMPDiscriminator, PyTree, dict[str, Array]]:
        """`discriminator_epochs` x `discriminator_minibatches` Adam steps, the
        policy's transitions against reference samples; the mean statistics."""
        features = jnp.concatenate([observation, next_observation], axis=-1)
        policy = features.reshape(-1, features.shape[-1]).astype(jnp.float32)
        minibatch_size = policy.shape[0] // self.discriminator_minibatches
        optimizer = self.make_discriminator_optimizer()
        grad_fn = eqx.filter_value_and_grad(discriminator_loss, has_aux=True)
        parameters, static = eqx.partition(discriminator, eqx.is_inexact_array)

        def minibatch_update(carry, policy_rows, reference_key):
            parameters, optimizer_state = carry
            model = eqx.combine(parameters, static)
            reference = jnp.concatenate(
                self._as_stored(self.reference.sample(reference_key, minibatch_size)),
                axis=-1,
            ).astype(jnp.float32)
            (_, statistics), grads = grad_fn(
                model, reference, policy_rows, self.gradient_penalty
            )
            grads = eqx.filter(grads, eqx.is_inexact_array)
            updates, optimizer_state = optimizer.update(grads, optimizer_state)
            parameters = eqx.apply_updates(parameters, updates)
            return (parameters, optimizer_state), statistics

        (parameters, optimizer_state), statistics = minibatch_epochs(
            minibatch_update,
            (parameters, optimizer_state),
            policy,
            key,
            num_epochs=self.discriminator_epochs,
            num_minibatches=self.discriminator_minibatches,
            minibatch_keys=True,
        )
        statistics = jtu.tree_map(jnp.mean, statistics)
        return eqx.combine(parameters, static), optimizer_state, statistics
