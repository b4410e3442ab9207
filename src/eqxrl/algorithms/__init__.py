"""Learning algorithms and the return computations they share."""

from .._speed_tricks import cpu_speed_tricks as cpu_speed_tricks
from ._amp import (
    AMP as AMP,
    AMPDiscriminator as AMPDiscriminator,
    AMPState as AMPState,
    discriminator_loss as discriminator_loss,
    style_reward as style_reward,
)
from ._base import (
    AbstractAlgorithm as AbstractAlgorithm,
    cpu_compiler_options as cpu_compiler_options,
)
from ._diagnostics import (
    EntropyCollapseWarning as EntropyCollapseWarning,
    check_entropy_collapse as check_entropy_collapse,
)
from ._dqn import DQN as DQN, huber_loss as huber_loss
from ._epochs import minibatch_epochs as minibatch_epochs
from ._iqn import IQN as IQN, quantile_huber_loss as quantile_huber_loss
from ._metrics import (
    ended_episode_metrics as ended_episode_metrics,
    ended_episodes as ended_episodes,
    episode_statistics as episode_statistics,
    iteration_episode_metrics as iteration_episode_metrics,
)
from ._off_policy import (
    AbstractOffPolicyActorCritic as AbstractOffPolicyActorCritic,
    AbstractOffPolicyAlgorithm as AbstractOffPolicyAlgorithm,
    AbstractOffPolicyIteration as AbstractOffPolicyIteration,
)
from ._on_policy import AbstractOnPolicyAlgorithm as AbstractOnPolicyAlgorithm
from ._parallel import (
    train_seeds as train_seeds,
    vmap_over_seeds as vmap_over_seeds,
)
from ._ppo import (
    PPO as PPO,
    PPOState as PPOState,
    episode_metrics as episode_metrics,
)
from ._pqn import (
    PQN as PQN,
    PQNRollout as PQNRollout,
    PQNState as PQNState,
    epsilon_greedy_rollout as epsilon_greedy_rollout,
)
from ._q_learning import (
    AbstractQLearning as AbstractQLearning,
    QLearningState as QLearningState,
    bootstrap_action_value as bootstrap_action_value,
)
from ._registry import (
    CommandLineOption as CommandLineOption,
    algorithm_names as algorithm_names,
    command_line_options as command_line_options,
    get_algorithm as get_algorithm,
    register_algorithm as register_algorithm,
    register_command_line_option as register_command_line_option,
)
from ._returns import (
    compute_gae as compute_gae,
    compute_q_lambda_returns as compute_q_lambda_returns,
)
from ._rollout import (
    epsilon_greedy_collect as epsilon_greedy_collect,
    epsilon_greedy_draws as epsilon_greedy_draws,
    step_with_truncation_value as step_with_truncation_value,
)
from ._sac import SAC as SAC, SACState as SACState
from ._schedules import learning_rate_schedule as learning_rate_schedule
from ._td3 import (
    DDPG as DDPG,
    TD3 as TD3,
    AbstractTD3 as AbstractTD3,
    TD3State as TD3State,
)
from ._train import TrainResult as TrainResult, train as train
