import abc
import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Bool, PRNGKeyArray, PyTree

from .._filters import filter_scan
from ..nn import AbstractPolicy
from ._diagnostics import check_entropy_collapse

StateT = TypeVar("StateT")

# The mesh axes that environments (`train(key, mesh=mesh)`) and runs
# (`train_seeds(algorithm, keys, mesh=mesh)`) are split over.
ENVS_AXIS = "envs"
SEEDS_AXIS = "seeds"


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

    @property
    def compiler_options(self) -> dict[str, Any]:
        """XLA options that `train`, `lower` and the [`Trainer`][eqxrl.Trainer]
        compile the run with.

        By default, [`cpu_compiler_options()`][eqxrl.algorithms.cpu_compiler_options]
        on the CPU backend (512-bit vectors on CPUs with AVX-512) and `{}` elsewhere;
        algorithms add their own.

        They apply when `train` is called outside of JAX transformations: JAX
        accepts compiler options on top-level programs alone, so under `vmap`
        (seeds, sweeps), a user's `jit` or `scan` the run is compiled as part of the
        enclosing program, with that program's options. The
        [`Trainer`][eqxrl.Trainer] always compiles with them, vmapped seeds
        included.
        """
        return cpu_compiler_options() if jax.default_backend() == "cpu" else {}

    def train_iterations(
        self,
        state: StateT,
        num_iterations: int,
        *,
        throw: bool = True,
        mesh: Mesh | None = None,
    ) -> tuple[StateT, dict[str, Array]]:
        """Run `num_iterations` iterations from `state` as one `lax.scan`.

        **Arguments:**

        - `state`: the training state to continue from.
        - `num_iterations`: how many iterations to run.
        - `throw`: stop with an error at the first iteration after which `diverged`
          is true (e.g. a NaN loss), instead of training on from parameters that are
          no longer numbers (see `train`).
        - `mesh`: split the environments over the mesh's `"envs"` axis (see
          `train`); `None` (or a mesh without that axis) leaves placement to JAX.

        **Returns:**

        `(state, metrics)`, each metric stacked to shape `[num_iterations]`.
        """
        name = type(self).__name__
        if mesh is not None and ENVS_AXIS in mesh.axis_names:
            self._check_envs_axis(mesh)
        if mesh is not None:
            state = self.shard_state(state, mesh)

        def body(carry, _):
            carry, metrics = self.train_iteration(carry)
            if throw:
                carry = _error_if_diverged(name, carry, self.diverged(carry, metrics))
            if mesh is not None:
                carry = self.shard_state(carry, mesh)
            return carry, metrics

        return filter_scan(body, state, length=num_iterations)

    def environment_axes(self, state: StateT) -> PyTree[int]:
        """For each leaf of a training state, the axis that indexes environments, or
        `-1` for leaves that every device holds whole (parameters, optimizer
        state, counters).

        With a mesh (`train(key, mesh=mesh)`), environment axes are split over the
        mesh's `"envs"` axis. The default: every leaf of `state.env_state` and
        `state.timestep` has environments first. Algorithms whose state holds more
        per-environment data (a replay buffer, running returns) override it; an
        algorithm whose state has neither field must, to train with a mesh.
        """
        if not (hasattr(state, "env_state") and hasattr(state, "timestep")):
            raise NotImplementedError(
                f"{type(self).__name__}: its training state has no env_state and "
                "timestep; override environment_axes to train with a mesh."
            )
        axes = jax.tree.map(lambda _: -1, state)
        return eqx.tree_at(
            lambda tree: (tree.env_state, tree.timestep),
            axes,
            (
                jax.tree.map(lambda _: 0, state.env_state),
                jax.tree.map(lambda _: 0, state.timestep),
            ),
            # A learner inside Independent holds no world: its env_state is None.
            is_leaf=lambda node: node is None,
        )

    def check_mesh(self, mesh: Mesh, num_runs: int | None = None) -> None:
        """Raise a `ValueError` unless this algorithm can train over `mesh`.

        For one run (`train(key, mesh=mesh)`, `num_runs=None`) the mesh needs an
        `"envs"` axis. For `num_runs` runs ([`train_seeds`][eqxrl.train_seeds],
        the [`Trainer`][eqxrl.Trainer] with `num_seeds`) it needs an `"envs"` or a
        `"seeds"` axis, or both. An `"envs"` axis must divide `num_envs`, a
        `"seeds"` axis `num_runs`.
        """
        name = type(self).__name__
        axes = tuple(mesh.axis_names)
        if num_runs is None and SEEDS_AXIS in axes and mesh.shape[SEEDS_AXIS] > 1:
            raise ValueError(
                f"{name}: the mesh has a {SEEDS_AXIS!r} axis, which splits several "
                "runs over devices; train them with eqxrl.train_seeds(algorithm, "
                "keys, mesh=mesh) (or Trainer(num_seeds=..., mesh=mesh))."
            )
        if num_runs is None and ENVS_AXIS not in axes:
            raise ValueError(
                f"{name}: the mesh has axes {axes}; training over devices splits "
                f"environments over an axis named {ENVS_AXIS!r}, e.g. "
                f"jax.make_mesh((jax.device_count(),), ({ENVS_AXIS!r},)). Several "
                f"seeds are split over a {SEEDS_AXIS!r} axis by eqxrl.train_seeds."
            )
        if num_runs is not None and not {ENVS_AXIS, SEEDS_AXIS} & set(axes):
            raise ValueError(
                f"{name}: the mesh has axes {axes}; runs are split over an axis "
                f"named {SEEDS_AXIS!r} and environments over one named "
                f"{ENVS_AXIS!r}, e.g. jax.make_mesh((jax.device_count(),), "
                f"({SEEDS_AXIS!r},))."
            )
        if ENVS_AXIS in axes:
            self._check_envs_axis(mesh)
        if num_runs is not None and SEEDS_AXIS in axes:
            devices = mesh.shape[SEEDS_AXIS]
            if num_runs % devices:
                raise ValueError(
                    f"{name}: {num_runs} runs (seeds) do not split evenly over the "
                    f"mesh's {devices} {SEEDS_AXIS!r} devices; train a multiple of "
                    f"{devices} runs."
                )

    def _check_envs_axis(self, mesh: Mesh) -> None:
        num_envs = getattr(self, "num_envs", None)
        devices = mesh.shape[ENVS_AXIS]
        if num_envs is not None and num_envs % devices:
            raise ValueError(
                f"{type(self).__name__}: num_envs={num_envs} does not split evenly "
                f"over the mesh's {devices} {ENVS_AXIS!r} devices; choose num_envs "
                f"a multiple of {devices}."
            )

    def state_shardings(
        self, state: StateT, mesh: Mesh, *, batched: bool = False
    ) -> PyTree:
        """Where each array of `state` lives on `mesh`: environment axes (see
        `environment_axes`) split over `"envs"`, everything else replicated; `None`
        for the state's non-array parts. With `batched`, `state` is a batch of runs'
        states (a leading axis of runs), split over `"seeds"` when the mesh has
        that axis. `state` may hold `jax.ShapeDtypeStruct`s in place of arrays."""
        mesh = auto_axes(mesh)
        envs = ENVS_AXIS if ENVS_AXIS in mesh.axis_names else None
        runs = SEEDS_AXIS if SEEDS_AXIS in mesh.axis_names else None
        batch = (runs,) if batched else ()

        def sharding(leaf: Any, axis: int | None) -> NamedSharding | None:
            if not (eqx.is_array(leaf) or isinstance(leaf, jax.ShapeDtypeStruct)):
                return None
            if axis < 0:
                return NamedSharding(mesh, PartitionSpec(*batch))
            return NamedSharding(mesh, PartitionSpec(*batch, *[None] * axis, envs))

        # The axes are read from the state's structure, which a batch keeps.
        axes = self.environment_axes(state)
        return jax.tree.map(sharding, state, axes)

    def place_state(
        self, state: StateT, mesh: Mesh, *, batched: bool = False
    ) -> StateT:
        """`state` (built on one device, or on the host) placed on `mesh` as
        `state_shardings` says. With several processes (`jax.distributed`), every
        process holds the same `state` and keeps the shards of its own devices."""
        return _place(state, self.state_shardings(state, mesh, batched=batched), _put)

    def shard_state(self, state: StateT, mesh: Mesh) -> StateT:
        """`state` constrained to its placement on `mesh` (`state_shardings`):
        inside a compiled program, XLA's partitioner then splits the work on
        environments and inserts the reductions (gradients, statistics, metrics)
        across devices, so the run computes what it computes on one device. Under
        [`vmap_over_seeds`][eqxrl.algorithms.vmap_over_seeds], the runs' axis is
        added to these constraints. A mesh without an `"envs"` axis leaves `state`
        as it is."""
        if ENVS_AXIS not in mesh.axis_names:
            return state
        return _place(state, self.state_shardings(state, mesh), _constrain)

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
        self, key: PRNGKeyArray, *, throw: bool = True, mesh: Mesh | None = None
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
        - `mesh`: a `jax.sharding.Mesh` with an axis named `"envs"`: the
          environments (their states, the rollout, replay rows) are split over its
          devices, parameters and optimizer state are replicated, and XLA reduces
          gradients, statistics and metrics across devices, so the run is the run
          of one device with the same `num_envs` (up to the order of float sums).
          `num_envs` must be a multiple of the axis size. Several seeds are split
          over devices by [`train_seeds`][eqxrl.train_seeds]. See
          [Scaling out](../scaling-out.md).

        **Returns:**

        `(state, metrics)`: the final training state and a dict of per-iteration
        metrics, each of shape `[num_iterations]`.
        """
        traced = isinstance(key, jax.core.Tracer)
        if mesh is not None and not traced:
            # The initial state is built on one device (small, and built once),
            # then spread over the mesh by the one placement rule, place_state.
            self.check_mesh(mesh)
            state = jit_with_options(_init, self.compiler_options)(self, key)
            state = self.place_state(state, mesh)
            state, metrics = jit_with_options(_train_from, self.compiler_options)(
                self, state, throw, mesh
            )
        else:
            state, metrics = jit_with_options(_train, self.compiler_options)(
                self, key, throw, mesh
            )
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(metrics))
        if not traced:
            check_entropy_collapse(metrics)
        return state, metrics

    def lower(
        self, key: PRNGKeyArray, *, throw: bool = True, mesh: Mesh | None = None
    ) -> Any:
        """`train` traced and lowered ahead of time, with `compiler_options`: JAX's
        `Lowered`, whose `.compile()` gives the compiled run, called as
        `compiled(algorithm, key, throw)` (`compiled(algorithm, key, throw, mesh)`
        with a mesh). For timing compilation apart from running (benchmarks) or
        checking the compiled program (`.as_text()`). With a mesh, it is the run
        as one program, initialization included, as `train` compiles it under a
        transformation; called directly, `train` builds the initial state on one
        device first.
        """
        train = jit_with_options(_train, self.compiler_options)
        if mesh is None:
            return train.lower(self, key, throw)  # type: ignore[attr-defined]
        self.check_mesh(mesh)
        return train.lower(self, key, throw, mesh)  # type: ignore[attr-defined]


def injected_learning_rate(optimizer_state: Any) -> Array:
    """The step size an optimizer built with `optax.inject_hyperparams` used last,
    read by name from its state (the array, not its schedule's state)."""
    learning_rate = optax.tree_utils.tree_get(
        optimizer_state,
        "learning_rate",
        filtering=lambda _, value: eqx.is_array(value),
    )
    return jnp.asarray(learning_rate, jnp.float32)


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


def with_replay_environment_axes(axes: Any, state: Any) -> Any:
    """`axes` with environments second in `state.buffer.transitions`: the replay
    buffer's `[capacity, num_envs, ...]` rows (DQN, IQN, SAC)."""
    return eqx.tree_at(
        lambda tree: tree.buffer.transitions,
        axes,
        jax.tree.map(lambda _: 1, state.buffer.transitions),
    )


def auto_axes(mesh: Mesh) -> Mesh:
    """`mesh` with Auto axes: the partitioner places everything the constraints
    leave open, as with `jax.make_mesh(..., axis_types=Auto)`; JAX's newer default,
    Explicit axes, would make sharding part of every array's type in the
    program."""
    return Mesh(
        mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * mesh.devices.ndim
    )


def _put(leaf: Array, sharding: NamedSharding) -> Array:
    if jax.process_count() == 1:
        return jax.device_put(leaf, sharding)
    # Across processes a sharding spans devices this process cannot address: each
    # process builds the global array from its own (identical) host copy.
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        data = _put(jax.random.key_data(leaf), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
    host = np.asarray(leaf)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _constrain(leaf: Array, sharding: NamedSharding) -> Array:
    return jax.lax.with_sharding_constraint(leaf, sharding)


def _place(state: Any, shardings: PyTree, put: Callable) -> Any:
    """`put(leaf, sharding)` for every array leaf that has a sharding."""
    return jax.tree.map(
        lambda leaf, sharding: leaf if sharding is None else put(leaf, sharding),
        state,
        shardings,
        is_leaf=lambda x: x is None,
    )


def _init(algorithm: AbstractAlgorithm, key: PRNGKeyArray) -> Any:
    return algorithm.init(key)


def _train_from(
    algorithm: AbstractAlgorithm, state: Any, throw: bool, mesh: Mesh
) -> tuple[Any, dict[str, Array]]:
    return algorithm.train_iterations(
        state, algorithm.num_iterations, throw=throw, mesh=mesh
    )


def _train(
    algorithm: AbstractAlgorithm,
    key: PRNGKeyArray,
    throw: bool,
    mesh: Mesh | None = None,
):
    return algorithm.train_iterations(
        algorithm.init(key), algorithm.num_iterations, throw=throw, mesh=mesh
    )


def cpu_compiler_options() -> dict[str, Any]:
    """XLA:CPU options that every eqxrl training program compiles with on this host.

    On a CPU with AVX-512, `{"xla_cpu_prefer_vector_width": 512}`: XLA otherwise
    vectorizes its fused loops 256 bits wide (against the clock throttling of early
    AVX-512 parts). Measured on a 2-core Sapphire Rapids: DQN 1.08x, IQN 1.02x, PPO
    1.02x, and a quarter less compile time. Elsewhere, `{}`.
    """
    return {"xla_cpu_prefer_vector_width": 512} if _host_has_avx512() else {}


@functools.cache
def _host_has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return any(
                line.startswith("flags") and " avx512f" in line for line in cpuinfo
            )
    except OSError:  # not Linux: keep XLA's default
        return False


def jit_with_options(function: Callable, compiler_options: dict[str, Any]) -> Callable:
    """`eqx.filter_jit(function)`, compiled with `compiler_options` when called at the
    top level, the only place JAX accepts them: with concrete arguments (no
    tracers) and not inside a user's `jit`. Under a transformation (`vmap` over
    seeds, a sweep, a user's `jit`) it is compiled as part of the enclosing program,
    without them. One jitted function (one compilation cache) per set of options."""
    plain = _cached_jit(function, ())
    options = tuple(sorted(compiler_options.items()))
    if not options:
        return plain
    tuned = _cached_jit(function, options)

    def call(*args: Any) -> Any:
        traced = any(
            isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(args)
        )
        # Inside a user's `jit` even a new constant is a tracer: the call is staged
        # into the enclosing program, where JAX refuses options.
        inside_jit = isinstance(jnp.zeros(()), jax.core.Tracer)
        return plain(*args) if traced or inside_jit else tuned(*args)

    def lower(*args: Any) -> Any:
        return tuned.lower(*args)  # type: ignore[attr-defined]

    call.lower = lower  # type: ignore[attr-defined]
    return call


@functools.cache
def _cached_jit(function: Callable, options: tuple) -> Callable:
    if options:
        return eqx.filter_jit(function, compiler_options=dict(options))
    return eqx.filter_jit(function)
