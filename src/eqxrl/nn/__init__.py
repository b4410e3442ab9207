"""Networks: actor-critics and initializers."""

from ._actor_critic import (
    AbstractActorCritic as AbstractActorCritic,
    MLPActorCritic as MLPActorCritic,
)
from ._init import orthogonal_matrices as orthogonal_matrices
