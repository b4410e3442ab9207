"""Networks: actor-critics, Q-networks, policies, normalization and initializers."""

from ._actor_critic import (
    AbstractActorCritic as AbstractActorCritic,
    MLPActorCritic as MLPActorCritic,
    MLPGaussianActorCritic as MLPGaussianActorCritic,
)
from ._carries import (
    ActorCriticCarry as ActorCriticCarry,
    GRUCarry as GRUCarry,
    LSTMCarry as LSTMCarry,
    reset_carry as reset_carry,
)
from ._cnn import CNNActorCritic as CNNActorCritic
from ._init import (
    orthogonal_matrices as orthogonal_matrices,
    orthonormal_columns as orthonormal_columns,
)
from ._linear import batch_size_hint as batch_size_hint
from ._multi_input import (
    MultiInputActorCritic as MultiInputActorCritic,
    ObservationEncoder as ObservationEncoder,
)
from ._noisy import (
    NoisyLinear as NoisyLinear,
    has_noisy_layers as has_noisy_layers,
    sample_noise as sample_noise,
)
from ._normalization import (
    NormalizedActorCritic as NormalizedActorCritic,
    RunningMeanStd as RunningMeanStd,
    empty_observation_statistics as empty_observation_statistics,
    normalize_observation as normalize_observation,
    update_observation_statistics as update_observation_statistics,
)
from ._policy import (
    AbstractPolicy as AbstractPolicy,
    ActorCriticPolicy as ActorCriticPolicy,
)
from ._q_networks import (
    AbstractQNetwork as AbstractQNetwork,
    AbstractQuantileNetwork as AbstractQuantileNetwork,
    CNNQNetwork as CNNQNetwork,
    EpsilonGreedyPolicy as EpsilonGreedyPolicy,
    ImplicitQuantileNetwork as ImplicitQuantileNetwork,
    MLPQNetwork as MLPQNetwork,
    epsilon_greedy_action as epsilon_greedy_action,
    greedy_action as greedy_action,
)
from ._recurrent import (
    AbstractRecurrentActorCritic as AbstractRecurrentActorCritic,
    GRUActorCritic as GRUActorCritic,
    LSTMActorCritic as LSTMActorCritic,
)
from ._recurrent_q_network import (
    AbstractRecurrentQNetwork as AbstractRecurrentQNetwork,
    GRUQNetwork as GRUQNetwork,
)
from ._sac_networks import (
    DeterministicPolicy as DeterministicPolicy,
    MLPDeterministicActor as MLPDeterministicActor,
    MLPTanhGaussianActor as MLPTanhGaussianActor,
    MLPTwinCritic as MLPTwinCritic,
    TanhGaussianPolicy as TanhGaussianPolicy,
)
from ._sequence_loop import sequence_batch_hint as sequence_batch_hint
from ._transformer import (
    GridTransformerActorCritic as GridTransformerActorCritic,
    TransformerBlock as TransformerBlock,
)
