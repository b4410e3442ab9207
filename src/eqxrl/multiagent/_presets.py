from typing import Any

from ..algorithms import IQN
from ..envs import AbstractEnvironment, TimeLimit, unwrap
from ._independent import Independent


def sorrel_iqn(
    env: AbstractEnvironment,
    *,
    num_epochs: int = 1000,
    num_envs: int = 1,
    share_parameters: bool = False,
    **overrides: Any,
) -> Independent:
    """Independent IQN learners with the agents of Sorrel's `treasurehunt` example
    (Sorrel 1.6.0's `iRainbowModel` as `treasurehunt/env.py` configures it).

    Every agent has its own IQN: a 250-unit ReLU layer on the flattened stacked
    views, a cosine embedding of 64 features, then noisy layers (independent
    Gaussian noise, `sigma_init` 0.017, none when acting): a hidden one of 250 units
    and a dueling head; 12 fractions for acting, for the prediction and for the
    target; the quantile Huber loss with `kappa` 1 averaged over all fraction pairs
    (`quantile_loss="mean"`); double-Q 1-step targets with `gamma` 0.99; Adam
    (2.5e-4, eps 1e-8) after clipping the gradient norm to 1; soft target updates
    with `tau` 0.001 after every update plus a copy every 200 updates; a replay
    buffer of 1,024 transitions per world; minibatches of 64; epsilon-greedy from
    0.6, multiplied by 0.9995 after every epoch (no floor), from the first step.

    Sorrel's schedule is an epoch (one episode of the environment's time limit,
    100 turns) then one gradient step per agent: here one iteration steps every
    world through one episode (`train_frequency` = the time limit) and each agent
    takes one gradient step. With `num_envs` worlds an iteration holds `num_envs`
    epochs and still one step per agent (raise `gradient_steps` to keep Sorrel's
    ratio).

    What differs from Sorrel: minibatches are drawn with replacement; the
    observation is the environment's frame stack (Sorrel's own, see
    [`TreasureHunt`][eqxrl.envs.TreasureHunt]), stored whole in the replay buffer
    with the next one, so no transition straddles two epochs (Sorrel's buffer
    masks those out of the loss); episodes end by truncation, which bootstraps, as
    Sorrel's never-done transitions do.

    **Arguments:**

    - `env`: the multi-agent environment with its time limit, e.g.
      `eqxrl.envs.make("TreasureHunt-v0")`.
    - `num_epochs`: episodes per world (iterations) of the run; Sorrel's 1,000.
    - `num_envs`: worlds stepped in parallel (Sorrel: one).
    - `share_parameters`: one network for all agents (see
      [`Independent`][eqxrl.multiagent.Independent]).
    - `**overrides`: any other [`IQN`][eqxrl.IQN] argument, replacing the above.

    **Returns:**

    The [`Independent`][eqxrl.multiagent.Independent] learners.

    !!! example

        ```python
        env = eqxrl.envs.make("TreasureHunt-v0")
        learners = eqxrl.multiagent.sorrel_iqn(env)
        state, metrics = learners.train(jax.random.key(0))
        metrics["total_episode_return"]  # per epoch, both agents together
        ```
    """
    turns = None
    for inner in unwrap(env):
        if isinstance(inner, TimeLimit):
            turns = inner.max_episode_steps
            break
    if turns is None:
        raise ValueError(
            "sorrel_iqn: the environment has no TimeLimit, so an epoch has no "
            "length; wrap it in eqxrl.envs.TimeLimit(env, turns) (make adds one)."
        )
    settings: dict[str, Any] = dict(
        num_envs=num_envs,
        total_timesteps=num_epochs * turns * num_envs,
        train_frequency=turns,
        gradient_steps=1,
        buffer_size=1024 * num_envs,
        learning_starts=0,
        batch_size=64,
        n_step=1,
        target_update_interval=1,
        tau=0.001,
        target_copy_interval=200,
        double_q=True,
        learning_rate=2.5e-4,
        adam_eps=1e-8,
        max_grad_norm=1.0,
        gamma=0.99,
        exploration_initial_eps=0.6,
        exploration_final_eps=0.0,
        exploration_decay=0.9995,
        hidden_sizes=(250,),
        head_sizes=(250,),
        num_cosines=64,
        num_quantiles=12,
        num_target_quantiles=12,
        num_acting_quantiles=12,
        kappa=1.0,
        quantile_loss="mean",
        dueling=True,
        noisy=True,
        sigma_init=0.017,
    )
    settings.update(overrides)
    return Independent(IQN(env=env, **settings), share_parameters=share_parameters)
