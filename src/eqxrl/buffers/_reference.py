import os

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray


class ReferenceMotion(eqx.Module):
    """Reference state transitions, e.g. a motion-capture clip, as a discriminator
    reads them: `n` pairs of an observation and the observation one step later.

    Loaded from arrays with [`from_npz`][eqxrl.buffers.ReferenceMotion.from_npz] or
    [`from_trajectory`][eqxrl.buffers.ReferenceMotion.from_trajectory]; sampled
    uniformly (with replacement) inside the compiled training program.

    **Arguments:**

    - `observation`: the transitions' first observations, `[n, dim]`.
    - `next_observation`: the observations one step later, `[n, dim]`.

    !!! example

        ```python
        trajectory = np.stack([np.cos(t), np.sin(t), omega], axis=-1)  # [T, 3]
        reference = eqxrl.buffers.ReferenceMotion.from_trajectory(trajectory)
        reference.save_npz("swing.npz")
        reference = eqxrl.buffers.ReferenceMotion.from_npz("swing.npz")
        ```
    """

    observation: Float[Array, "n dim"]
    next_observation: Float[Array, "n dim"]

    def __check_init__(self):
        if self.observation.shape[0] == 0:
            raise ValueError("ReferenceMotion: no transitions (n = 0).")

    @property
    def num_transitions(self) -> int:
        """How many transitions it holds (`n`)."""
        return self.observation.shape[0]

    @property
    def observation_size(self) -> int:
        """The size of one observation (`dim`)."""
        return self.observation.shape[1]

    @classmethod
    def from_trajectory(
        cls, trajectory: Float[np.ndarray | Array, "T dim"]
    ) -> "ReferenceMotion":
        """The `T - 1` transitions of consecutive observations of one trajectory.

        **Arguments:**

        - `trajectory`: observations at consecutive steps, `[T, dim]` with `T >= 2`.
        """
        trajectory = np.asarray(trajectory, dtype=np.float32)
        if trajectory.ndim != 2 or trajectory.shape[0] < 2:
            raise ValueError(
                "ReferenceMotion.from_trajectory: expected observations at "
                f"consecutive steps, shape [T >= 2, dim]; got {trajectory.shape}."
            )
        return cls(
            observation=jnp.asarray(trajectory[:-1]),
            next_observation=jnp.asarray(trajectory[1:]),
        )

    @classmethod
    def from_npz(
        cls, path: str | os.PathLike, observation_size: int | None = None
    ) -> "ReferenceMotion":
        """Load reference transitions from a NumPy `.npz` file.

        The file holds either the arrays `observation` and `next_observation`
        (`[n, dim]` each, row `i` one transition), or one array `trajectory`
        (`[T, dim]`, consecutive observations of one clip: its `T - 1` pairs, as
        [`from_trajectory`][eqxrl.buffers.ReferenceMotion.from_trajectory]).
        Values are read as float32.

        **Arguments:**

        - `path`: the `.npz` file (e.g. written by `save_npz` or `numpy.savez`).
        - `observation_size`: if given, the environment's observation size that
          `dim` must equal.

        **Returns:**

        The `ReferenceMotion`. A `ValueError` names a missing key, a wrong shape or
        a size that does not match `observation_size`.
        """
        with np.load(path) as data:
            keys = set(data.files)
            if {"observation", "next_observation"} <= keys:
                observation = np.asarray(data["observation"], dtype=np.float32)
                next_observation = np.asarray(
                    data["next_observation"], dtype=np.float32
                )
            elif "trajectory" in keys:
                motion = cls.from_trajectory(data["trajectory"])
                observation = np.asarray(motion.observation)
                next_observation = np.asarray(motion.next_observation)
            else:
                raise ValueError(
                    f"ReferenceMotion.from_npz: {os.fspath(path)!r} holds "
                    f"{sorted(keys)}; expected the arrays 'observation' and "
                    "'next_observation' ([n, dim] each), or one 'trajectory' "
                    "([T, dim])."
                )
        if observation.ndim != 2 or observation.shape != next_observation.shape:
            raise ValueError(
                "ReferenceMotion.from_npz: 'observation' and 'next_observation' "
                f"must both have shape [n, dim]; got {observation.shape} and "
                f"{next_observation.shape}."
            )
        if observation_size is not None and observation.shape[1] != observation_size:
            raise ValueError(
                f"ReferenceMotion.from_npz: the reference's observations have size "
                f"{observation.shape[1]}, the environment's {observation_size}; "
                "record the reference with the environment's observation layout."
            )
        return cls(
            observation=jnp.asarray(observation),
            next_observation=jnp.asarray(next_observation),
        )

    def save_npz(self, path: str | os.PathLike) -> None:
        """Write the transitions to a `.npz` file (`observation` and
        `next_observation`) that [`from_npz`][eqxrl.buffers.ReferenceMotion.from_npz]
        reads back."""
        np.savez(
            path,
            observation=np.asarray(self.observation),
            next_observation=np.asarray(self.next_observation),
        )

    def sample(
        self, key: PRNGKeyArray, batch_size: int
    ) -> tuple[Float[Array, "{batch_size} dim"], Float[Array, "{batch_size} dim"]]:
        """`batch_size` transitions drawn uniformly with replacement.

        **Returns:**

        `(observation, next_observation)`, `[batch_size, dim]` each.
        """
        indices = jr.randint(key, (batch_size,), 0, self.num_transitions)
        return self.observation[indices], self.next_observation[indices]
