import abc
from typing import Generic, TypeVar

import equinox as eqx
import jax
from jaxtyping import Array, PRNGKeyArray

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
        self, state: StateT, num_iterations: int
    ) -> tuple[StateT, dict[str, Array]]:
        """Run `num_iterations` iterations from `state` as one `lax.scan`.

        **Returns:**

        `(state, metrics)`, each metric stacked to shape `[num_iterations]`.
        """

        def body(carry, _):
            return self.train_iteration(carry)

        return filter_scan(body, state, length=num_iterations)

    def train(self, key: PRNGKeyArray) -> tuple[StateT, dict[str, Array]]:
        """A whole training run, compiled as one program.

        Called outside of JAX transformations, it also checks the metrics on the host
        afterwards and warns about problems such as an early entropy collapse
        ([`check_entropy_collapse`][eqxrl.algorithms.check_entropy_collapse]).

        **Arguments:**

        - `key`: a PRNG key; all randomness of the run comes from it, so the same key
          gives the same result on the same machine.

        **Returns:**

        `(state, metrics)`: the final training state and a dict of per-iteration
        metrics, each of shape `[num_iterations]`.
        """
        state, metrics = _train(self, key)
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(metrics))
        if not traced:
            check_entropy_collapse(metrics)
        return state, metrics


@eqx.filter_jit
def _train(algorithm: AbstractAlgorithm, key: PRNGKeyArray):
    return algorithm.train_iterations(algorithm.init(key), algorithm.num_iterations)
