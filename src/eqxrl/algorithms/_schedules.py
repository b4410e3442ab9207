"""The step-size schedule the algorithms share, built from optax's schedules."""

import optax
from jaxtyping import Array, ArrayLike, Float, Int


def learning_rate_schedule(
    learning_rate: Float[ArrayLike, ""],
    *,
    anneal: bool,
    decay_steps: int,
    updates_per_step: int = 1,
) -> optax.Schedule:
    """The step size of each update: constant, or (`anneal`) decaying linearly
    from `learning_rate` to zero over `decay_steps` steps and zero after them.

    A step is `updates_per_step` updates: PPO and PQN decay once per iteration
    (`num_epochs * num_minibatches` updates), as PureJaxRL and purejaxql do; DQN
    and IQN once per update. Training on past the last step (`train_iterations`)
    keeps a zero step size, never a negative one.

    Both forms are callables, so `optax.inject_hyperparams` keeps the same state
    (and a checkpoint the same leaves) whether the run anneals or not, and the
    step size is logged and sweepable (`learning_rate` may be a traced array).

    **Arguments:**

    - `learning_rate`: the first step size.
    - `anneal`: (static) decay it, or keep it constant.
    - `decay_steps`: (static) the steps it takes to reach zero (at least 1).
    - `updates_per_step`: (static) the optimizer updates of one step.
    """
    if not anneal:
        return optax.constant_schedule(learning_rate)
    if decay_steps < 1 or updates_per_step < 1:
        raise ValueError(
            "learning_rate_schedule: decay_steps and updates_per_step must be at "
            f"least 1, got {decay_steps} and {updates_per_step}."
        )
    decay = optax.linear_schedule(learning_rate, 0.0, decay_steps)
    if updates_per_step == 1:
        return decay

    def per_step(count: Int[Array, ""]) -> Float[Array, ""]:
        return decay(count // updates_per_step)

    return per_step
