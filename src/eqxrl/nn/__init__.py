"""Networks: actor-critics, policies and initializers."""

from ._actor_critic import (
    AbstractActorCritic as AbstractActorCritic,
    MLPActorCritic as MLPActorCritic,
)
from ._init import orthogonal_matrices as orthogonal_matrices
from ._policy import (
    AbstractPolicy as AbstractPolicy,
    ActorCriticPolicy as ActorCriticPolicy,
)
