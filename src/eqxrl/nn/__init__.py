"""Networks: actor-critics, policies, normalization and initializers."""

from ._actor_critic import (
    AbstractActorCritic as AbstractActorCritic,
    MLPActorCritic as MLPActorCritic,
    MLPGaussianActorCritic as MLPGaussianActorCritic,
)
from ._cnn import CNNActorCritic as CNNActorCritic
from ._init import orthogonal_matrices as orthogonal_matrices
from ._normalization import (
    NormalizedActorCritic as NormalizedActorCritic,
    RunningMeanStd as RunningMeanStd,
)
from ._policy import (
    AbstractPolicy as AbstractPolicy,
    ActorCriticPolicy as ActorCriticPolicy,
)
from ._transformer import (
    GridTransformerActorCritic as GridTransformerActorCritic,
    TransformerBlock as TransformerBlock,
)
