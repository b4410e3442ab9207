import abc
from typing import Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, PRNGKeyArray

from .._filters import filter_scan
from ..nn import AbstractPolicy
from ._diagnostics import check_entropy_collapse

StateT = TypeVar("StateT")


class AbstractAlgorithm(eqx.Module, Generic[StateT]):
    """A learning algorithm: hyperparameters in, a pure training program out.

    The algorithm object holds only configuration (sweepable numbers as array leaves,
    structural choices as static fields). `init(key)` builds the training state, and
    `train_iteration(state)` advances it by one iteration and returns a fixed-size
    dict of scalar metrics. `train(key)` runs the whole run as one compiled program;
    it is pure, so `eqx.filter_vmap(algorithm.train)(keys)` trains several seeds in
    one compilation.
    """

    @property
    @abc.abstractmethod
    def num_iterations(self) -> int:
        """How many calls of `train_iteration` make up one `train` run."""

    @abc.abstractmethod
    def init(self, key: PRNGKeyArray) -> StateT:
        """The training state at the start of a run."""

    @abc.abstractmethod
    def train_iteration(self, state: StateT) -> tuple[StateT, dict[str, Array]]:
        """One iteration (e.g. one PPO rollout and its updates) and its metrics."""

    @abc.abstractmethod
    def policy(self, state: StateT, deterministic: bool = False) -> AbstractPolicy:
        """The policy being trained, from a training state, ready to `act`.

        **Arguments:**

        - `state`: a training state (e.g. the first output of `train`).
        - `deterministic`: act greedily instead of sampling.
        """

    def train_iterations(
        self, state: StateT, num_iterations: int, *, throw: bool = True
    ) -> tuple[StateT, dict[str, Array]]:
        """Run `num_iterations` iterations from `state` as one `lax.scan`.

        **Arguments:**

        - `state`: the training state to continue from.
        - `num_iterations`: how many iterations to run.
        - `throw`: stop with an error at the first iteration after which `diverged`
          is true (e.g. a NaN loss), instead of training on from parameters that are
          no longer numbers (see `train`).

        **Returns:**

        `(state, metrics)`, each metric stacked to shape `[num_iterations]`.
        """
        name = type(self).__name__

        def body(carry, _):
            carry, metrics = self.train_iteration(carry)
            if throw:
                carry = _error_if_diverged(name, carry, self.diverged(carry, metrics))
            return carry, metrics

        return filter_scan(body, state, length=num_iterations)

    def diverged(self, state: StateT, metrics: dict[str, Array]) -> Bool[Array, ""]:
        """Whether training has diverged, from one iteration's new state and metrics.

        The default: some metric whose name ends in `loss` is NaN or infinite.
        Algorithms whose loss metrics can be NaN by design (e.g. DQN before its first
        update) override it.
        """
        del state
        flags = [
            jnp.logical_not(jnp.all(jnp.isfinite(value)))
            for key, value in metrics.items()
            if key.endswith("loss")
        ]
        return jnp.any(jnp.stack(flags)) if flags else jnp.bool_(False)

    def train(
        self, key: PRNGKeyArray, *, throw: bool = True
    ) -> tuple[StateT, dict[str, Array]]:
        """A whole training run, compiled as one program.

        Called outside of JAX transformations, it also checks the metrics on the host
        afterwards and warns about problems such as an early entropy collapse
        ([`check_entropy_collapse`][eqxrl.algorithms.check_entropy_collapse]).

        **Arguments:**

        - `key`: a PRNG key; all randomness of the run comes from it, so the same key
          gives the same result on the same machine.
        - `throw`: raise an error (through `eqx.error_if`, at the iteration where it
          happens) when training diverges (`diverged`: e.g. a loss becomes NaN or
          infinite, from a learning rate far too large). Under `vmap` one diverging
          member stops the whole batch: pass `throw=False` for sweeps, then divergent
          members show non-finite values in their metrics while the others train
          normally.

        **Returns:**

        `(state, metrics)`: the final training state and a dict of per-iteration
        metrics, each of shape `[num_iterations]`.
        """
        state, metrics = _train(self, key, throw)
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(metrics))
        if not traced:
            check_entropy_collapse(metrics)
        return state, metrics


def _error_if_diverged(name: str, state: StateT, diverged: Bool[Array, ""]) -> StateT:
    """`state`, through `eqx.error_if(diverged)`."""
    dynamic, static = eqx.partition(state, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)
    if not leaves:
        return state
    leaves[0] = eqx.error_if(
        leaves[0],
        diverged,
        f"{name}: training diverged (a loss or the parameters became NaN or "
        "infinite). Usual causes: a learning rate far too large, non-finite rewards "
        "or observations from the environment, or unbounded rewards (try "
        "normalize_rewards). Pass throw=False to train on and find the divergent "
        "runs in the metrics.",
    )
    return eqx.combine(jax.tree.unflatten(treedef, leaves), static)


@eqx.filter_jit
def _train(algorithm: AbstractAlgorithm, key: PRNGKeyArray, throw: bool):
    return algorithm.train_iterations(
        algorithm.init(key), algorithm.num_iterations, throw=throw
    )
