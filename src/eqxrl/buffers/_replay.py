import equinox as eqx
import jax
import jax.lax as lax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree


class ReplayTransition(eqx.Module):
    """One environment step as an off-policy learner stores it (one environment).

    Built per environment inside the vmapped collection step; a batch of them (one per
    environment, `[num_envs, ...]` leaves) is what
    [`ReplayBuffer.add`][eqxrl.buffers.ReplayBuffer.add] takes.

    **Arguments:**

    - `observation`: the observation the action was chosen from (one frame: frame
      stacks are assembled when sampling).
    - `action`: the action taken.
    - `reward`: float32 reward of the step.
    - `terminated`: bool, the step reached a terminal state (no bootstrapping).
    - `truncated`: bool, the step cut the episode short (bootstrap from
      `next_observation`).
    - `next_observation`: the observation the step led to, *before* any auto-reset
      (on the last step of an episode, its final observation).
    - `next_action_mask`: bool `[num_actions]`, the valid actions at
      `next_observation` (for the greedy action of a bootstrap target), or `None`.
    """

    observation: PyTree[Array]
    action: Array
    reward: Float[Array, ""]
    terminated: Bool[Array, ""]
    truncated: Bool[Array, ""]
    next_observation: PyTree[Array]
    next_action_mask: Bool[Array, " num_actions"] | None = None


class ReplaySequence(eqx.Module):
    """A chunk of one environment's consecutive steps, as a recurrent off-policy
    learner stores it: the steps of one iteration (R2D2's sequences, with the
    carry the first step was read with).

    Built per environment; a batch of them (`[num_envs, ...]` leaves) is one
    [`ReplayBuffer.add`][eqxrl.buffers.ReplayBuffer.add] row, and
    [`gather_sequences`][eqxrl.buffers.ReplayBuffer.gather_sequences] draws them
    back. Every step's next observation is in the chunk: `observation` holds
    `num_steps + 1` observations, the last being what the chunk's last step led to
    (the next episode's first, after an automatic reset).

    **Arguments:**

    - `observation`: `[num_steps + 1, ...]` leaves.
    - `action`: `[num_steps, ...]`, the actions taken.
    - `reward`: float32 `[num_steps]`.
    - `terminated`, `truncated`: bool `[num_steps]`, each step's episode end.
    - `episode_start`: bool `[num_steps + 1]`, set where an observation is the
      first of an episode (the network's carry resets before reading it).
    - `carry`: the network's carry before the first observation (unless that one
      starts an episode), or `None` for a feed-forward network.
    """

    observation: PyTree[Array]
    action: Array
    reward: Float[Array, " num_steps"]
    terminated: Bool[Array, " num_steps"]
    truncated: Bool[Array, " num_steps"]
    episode_start: Bool[Array, " num_steps+1"]
    carry: PyTree[Array] | None = None


class ReplaySample(eqx.Module):
    """A transition drawn from a [`ReplayBuffer`][eqxrl.buffers.ReplayBuffer], ready
    for a bootstrapped target `reward + discount * value(next_observation)`.

    Shapes are per example; `ReplayBuffer.sample` returns them with a leading
    `batch_size` axis.

    **Arguments:**

    - `observation`: the observation (`[frame_stack, ...]` leaves with frame
      stacking, oldest frame first).
    - `action`: the action taken from it.
    - `reward`: the discounted sum of the rewards of up to `n_step` steps, stopping at
      the end of the episode.
    - `discount`: `gamma ** m` for an `m`-step return that bootstraps, `0` when the
      episode terminated within those steps.
    - `next_observation`: the observation to bootstrap from (the final observation
      when the episode was truncated), frame-stacked like `observation`.
    - `next_action_mask`: the valid actions at `next_observation`, or `None`.
    - `num_steps`: int32 `m`, how many rewards `reward` sums (1 to `n_step`).
    """

    observation: PyTree[Array]
    action: Array
    reward: Float[Array, ""]
    discount: Float[Array, ""]
    next_observation: PyTree[Array]
    next_action_mask: Bool[Array, " num_actions"] | None
    num_steps: Int[Array, ""]


def n_step_return(
    rewards: Float[Array, " n_step"],
    terminated: Bool[Array, " n_step"],
    truncated: Bool[Array, " n_step"],
    available: Bool[Array, " n_step"],
    gamma: Float[ArrayLike, ""],
) -> tuple[Float[Array, ""], Float[Array, ""], Int[Array, ""]]:
    """The n-step return of one transition, stopping at the end of its episode.

    Step `0` is the transition itself, steps `1..n-1` the ones that followed it in
    the same environment. The sum stops after the first step that terminated or
    truncated the episode (it never crosses an episode boundary) and before the first
    step that is not `available` (not yet collected). Termination ends bootstrapping
    (`discount = 0`); truncation does not (`discount = gamma ** m`, bootstrapping
    from the final observation).

    **Arguments:**

    - `rewards`, `terminated`, `truncated`: of the `n` consecutive steps.
    - `available`: which of the steps exist; step `0` must.
    - `gamma`: the discount factor.

    **Returns:**

    `(reward, discount, last)`: `reward = sum_{i<=last} gamma**i * rewards[i]`,
    `discount` as above, and `last` (int32), the index of the step to bootstrap
    after (`m = last + 1` steps are summed).
    """
    gamma = jnp.asarray(gamma, jnp.float32)
    ended = terminated | truncated
    # Step i counts if it is available and no earlier step ended the episode.
    ended_before = jnp.concatenate(
        [jnp.zeros(1, bool), jnp.cumsum(ended[:-1].astype(jnp.int32)) > 0]
    )
    counts = available & ~ended_before
    counts = jnp.cumprod(counts.astype(jnp.int32)).astype(bool)
    last = jnp.sum(counts.astype(jnp.int32)) - 1
    powers = gamma ** jnp.arange(rewards.shape[0], dtype=jnp.float32)
    reward = jnp.sum(jnp.where(counts, powers * rewards, 0.0))
    discount = jnp.where(terminated[last], 0.0, gamma ** (last + 1).astype(jnp.float32))
    return reward, discount, last.astype(jnp.int32)


class ReplayBuffer(eqx.Module):
    """A circular buffer of transitions from `num_envs` environments, on device.

    Transitions are stored in fixed-size arrays with leaves
    `[capacity, num_envs, ...]`: each [`add`][eqxrl.buffers.ReplayBuffer.add] writes
    one row (one step of every environment) at `position`, overwriting the oldest row
    once the buffer is full. The capacity is read from the shapes, so it is static
    and the buffer is an ordinary pytree: carry it through `lax.scan`, vmap it over
    seeds, donate it to a jitted function. `add` is a `dynamic_update_slice` of one
    row, which XLA performs in place when the buffer is donated (a scan carry is):
    its cost does not grow with the capacity. `sample` draws uniformly (with
    replacement) among the stored transitions; its cost does not grow with the
    capacity either.

    Because each environment's steps are stored in order, sampling can assemble
    n-step returns (that never cross an episode boundary, bootstrapping through
    truncation but not termination) and frame stacks (`k` consecutive observations
    of the same episode, zero-padded before its start) without storing anything
    twice. Rows older than the oldest stored one are treated as unknown: a frame
    stack reaching them is zero-padded, an n-step window reaching the newest row is
    cut short there.

    Create one with [`ReplayBuffer.empty`][eqxrl.buffers.ReplayBuffer.empty].

    **Arguments:**

    - `transitions`: the storage, a
      [`ReplayTransition`][eqxrl.buffers.ReplayTransition] (or, for learners that
      replay sequences, a [`ReplaySequence`][eqxrl.buffers.ReplaySequence]) with
      `[capacity, num_envs, ...]` leaves.
    - `position`: int32 row the next `add` writes.
    - `size`: int32 number of rows stored (at most `capacity`); the buffer holds
      `size * num_envs` transitions.

    !!! example

        ```python
        buffer = eqxrl.buffers.ReplayBuffer.empty(example_batch, capacity=10_000)
        buffer = buffer.add(batch)  # one ReplayTransition per environment
        sample = buffer.sample(key, 256, n_step=3, gamma=0.99)
        ```
    """

    transitions: ReplayTransition | ReplaySequence
    position: Int[Array, ""]
    size: Int[Array, ""]

    @classmethod
    def empty(
        cls, example: ReplayTransition | ReplaySequence, capacity: int
    ) -> "ReplayBuffer":
        """An empty buffer for batches shaped like `example`.

        **Arguments:**

        - `example`: a batch of transitions with `[num_envs, ...]` leaves (only
          shapes and dtypes are used, e.g. the output of `jax.eval_shape`).
        - `capacity`: rows to keep; the buffer holds `capacity * num_envs`
          transitions.

        **Returns:**

        A zero-filled `ReplayBuffer` with `size = 0`.
        """
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(
                f"ReplayBuffer.empty: capacity={capacity!r} must be a positive integer."
            )
        leaves = jtu.tree_leaves(example)
        if not leaves or any(len(leaf.shape) < 1 for leaf in leaves):
            raise ValueError(
                "ReplayBuffer.empty: example must be a batch of transitions, with a "
                "leading num_envs axis on every leaf."
            )
        num_envs = example.reward.shape[0]
        if any(leaf.shape[0] != num_envs for leaf in leaves):
            raise ValueError(
                "ReplayBuffer.empty: every leaf of example must have the same leading "
                f"num_envs axis ({num_envs})."
            )
        transitions = jtu.tree_map(
            lambda leaf: jnp.zeros((capacity, *leaf.shape), leaf.dtype), example
        )
        return cls(transitions, jnp.int32(0), jnp.int32(0))

    @property
    def capacity(self) -> int:
        """Rows the buffer keeps (static, read from the shapes)."""
        return self.transitions.reward.shape[0]

    @property
    def num_envs(self) -> int:
        """Transitions per row (static, read from the shapes)."""
        return self.transitions.reward.shape[1]

    def add(self, batch: ReplayTransition | ReplaySequence) -> "ReplayBuffer":
        """Write one step of every environment, overwriting the oldest when full.

        **Arguments:**

        - `batch`: a [`ReplayTransition`][eqxrl.buffers.ReplayTransition] with
          `[num_envs, ...]` leaves, shaped like the buffer's example.

        **Returns:**

        The new buffer. Only one row is written (`dynamic_update_slice`); when the
        old buffer is donated (e.g. it is a `lax.scan` carry, or passed to a
        function jitted with `donate_argnums`), XLA writes it in place.
        """
        stored = jtu.tree_structure(self.transitions)
        if jtu.tree_structure(batch) != stored:
            raise ValueError(
                f"ReplayBuffer.add: batch has structure {jtu.tree_structure(batch)}, "
                f"the buffer stores {stored}."
            )

        def write(storage: Array, item: Array) -> Array:
            if item.shape != storage.shape[1:] or item.dtype != storage.dtype:
                raise ValueError(
                    f"ReplayBuffer.add: got a leaf of shape {item.shape} and dtype "
                    f"{item.dtype}, the buffer stores {storage.shape[1:]} "
                    f"{storage.dtype} per row."
                )
            return lax.dynamic_update_index_in_dim(storage, item, self.position, 0)

        transitions = jtu.tree_map(write, self.transitions, batch)
        return ReplayBuffer(
            transitions,
            (self.position + 1) % self.capacity,
            jnp.minimum(self.size + 1, self.capacity),
        )

    def sample(
        self,
        key: PRNGKeyArray,
        batch_size: int,
        *,
        n_step: int = 1,
        gamma: Float[ArrayLike, ""] = 0.99,
        frame_stack: int = 1,
    ) -> ReplaySample:
        """Draw `batch_size` transitions uniformly, with replacement.

        Sampling from an empty buffer is an error (raised by `eqx.error_if` when the
        compiled program runs), never a batch of zeros.

        **Arguments:**

        - `key`: a PRNG key.
        - `batch_size`: how many transitions.
        - `n_step`: the largest number of rewards each return sums (see
          [`n_step_return`][eqxrl.buffers.n_step_return]).
        - `gamma`: the discount factor of the n-step return.
        - `frame_stack`: observations per frame stack (`1`: no stacking, the
          observation as stored).

        **Returns:**

        A [`ReplaySample`][eqxrl.buffers.ReplaySample] with `[batch_size, ...]`
        leaves.
        """
        index = self.sample_indices(key, (batch_size,))
        return self.gather(index, n_step=n_step, gamma=gamma, frame_stack=frame_stack)

    def sample_indices(
        self, key: PRNGKeyArray, shape: tuple[int, ...]
    ) -> Int[Array, "..."]:
        """Uniformly random indices of stored transitions, for
        [`gather`][eqxrl.buffers.ReplayBuffer.gather] (e.g. all the minibatches of
        several updates in one call). An empty buffer is an error, as in `sample`.

        **Arguments:**

        - `key`: a PRNG key.
        - `shape`: the shape of the int32 index array.
        """
        size = eqx.error_if(
            self.size,
            self.size == 0,
            "ReplayBuffer.sample: the buffer is empty; add transitions before "
            "sampling (e.g. start learning after learning_starts steps).",
        )
        return jr.randint(key, shape, 0, size * self.num_envs, jnp.int32)

    def gather(
        self,
        index: Int[Array, " batch"],
        *,
        n_step: int = 1,
        gamma: Float[ArrayLike, ""] = 0.99,
        frame_stack: int = 1,
    ) -> ReplaySample:
        """The transitions at given indices, as `sample` returns them.

        Index `i` is the transition of environment `i % num_envs` in the
        `i // num_envs`-th oldest stored row; valid indices are
        `0 <= i < size * num_envs`.

        **Arguments:**

        - `index`: int32 indices.
        - `n_step`, `gamma`, `frame_stack`: as in
          [`sample`][eqxrl.buffers.ReplayBuffer.sample].

        **Returns:**

        A [`ReplaySample`][eqxrl.buffers.ReplaySample] with `[batch, ...]` leaves.
        """
        if isinstance(self.transitions, ReplaySequence):
            raise ValueError(
                "ReplayBuffer.gather: this buffer stores ReplaySequences; draw them "
                "with gather_sequences."
            )
        if not isinstance(n_step, int) or n_step < 1:
            raise ValueError(f"ReplayBuffer: n_step={n_step!r} must be an int >= 1.")
        if not isinstance(frame_stack, int) or frame_stack < 1:
            raise ValueError(
                f"ReplayBuffer: frame_stack={frame_stack!r} must be an int >= 1."
            )
        gamma = jnp.asarray(gamma, jnp.float32)
        return jax.vmap(lambda i: self._gather_one(i, n_step, gamma, frame_stack))(
            index
        )

    def gather_sequences(self, index: Int[Array, " batch"]) -> ReplaySequence:
        """The stored sequences at given indices (a buffer of
        [`ReplaySequence`][eqxrl.buffers.ReplaySequence] rows), numbered as
        [`gather`][eqxrl.buffers.ReplayBuffer.gather] numbers transitions: index
        `i` is environment `i % num_envs`'s chunk in the `i // num_envs`-th oldest
        row. Draw them with `sample_indices`.

        **Returns:**

        A `ReplaySequence` with `[batch, ...]` leaves.
        """
        if not isinstance(self.transitions, ReplaySequence):
            raise ValueError(
                "ReplayBuffer.gather_sequences: this buffer stores "
                f"{type(self.transitions).__name__}s, not ReplaySequences; use "
                "gather."
            )
        age, env = jnp.divmod(index.astype(jnp.int32), self.num_envs)
        row = (self.position - self.size + age) % self.capacity
        return jtu.tree_map(lambda leaf: leaf[row, env], self.transitions)

    def _gather_one(
        self,
        index: Int[Array, ""],
        n_step: int,
        gamma: Float[Array, ""],
        frame_stack: int,
    ) -> ReplaySample:
        data = self.transitions
        capacity = self.capacity
        age, env = jnp.divmod(index.astype(jnp.int32), self.num_envs)
        oldest = (self.position - self.size) % capacity
        row = (oldest + age) % capacity

        def at(leaf: Array, rows: Array) -> Array:
            return leaf[rows, env]

        if n_step == 1:
            reward, terminated = at(data.reward, row), at(data.terminated, row)
            discount = jnp.where(terminated, 0.0, gamma)
            last = jnp.int32(0)
        else:
            offsets = jnp.arange(n_step, dtype=jnp.int32)
            rows = (row + offsets) % capacity
            reward, discount, last = n_step_return(
                at(data.reward, rows),
                at(data.terminated, rows),
                at(data.truncated, rows),
                age + offsets < self.size,
                gamma,
            )
        last_row = (row + last) % capacity

        next_observation = jtu.tree_map(
            lambda leaf: at(leaf, last_row), data.next_observation
        )
        if frame_stack == 1:
            observation = jtu.tree_map(lambda leaf: at(leaf, row), data.observation)
        else:
            observation = self._frame_stack(row, age, env, frame_stack)
            history = self._frame_stack(last_row, age + last, env, frame_stack - 1)
            next_observation = jtu.tree_map(
                lambda frames, final: jnp.concatenate([frames, final[None]]),
                history,
                next_observation,
            )
        next_action_mask = jtu.tree_map(
            lambda leaf: at(leaf, last_row), data.next_action_mask
        )
        return ReplaySample(
            observation=observation,
            action=at(data.action, row),
            reward=reward,
            discount=discount,
            next_observation=next_observation,
            next_action_mask=next_action_mask,
            num_steps=last + 1,
        )

    def _frame_stack(
        self, row: Int[Array, ""], age: Int[Array, ""], env: Int[Array, ""], k: int
    ) -> PyTree[Array]:
        """Observations of rows `row - k + 1 .. row` of one environment, oldest first,
        zeroed where they precede the episode of `row` or the oldest stored row."""
        data = self.transitions
        back = jnp.arange(k - 1, -1, -1, dtype=jnp.int32)  # k-1, ..., 0 steps back
        rows = (row - back) % self.capacity
        # Frame j steps back belongs to the episode iff it is stored and none of the
        # j steps after it (rows - j .. row - 1) ended an episode.
        ended = (data.terminated[rows, env] | data.truncated[rows, env]).astype(
            jnp.int32
        )
        ended_from = jnp.cumsum(ended[::-1])[::-1]  # ends at this frame or later
        ended_between = ended_from - ended[-1]  # ... excluding the newest frame
        keep = (back <= age) & (ended_between == 0)

        def frames(leaf: Array) -> Array:
            stacked = leaf[rows, env]
            mask = keep.reshape(k, *([1] * (stacked.ndim - 1)))
            return jnp.where(mask, stacked, jnp.zeros((), stacked.dtype))

        return jtu.tree_map(frames, data.observation)
