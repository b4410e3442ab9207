"""Storage for experience: on-policy transitions and the replay buffer."""

from ._reference import ReferenceMotion as ReferenceMotion
from ._replay import (
    ReplayBuffer as ReplayBuffer,
    ReplaySample as ReplaySample,
    ReplaySequence as ReplaySequence,
    ReplayTransition as ReplayTransition,
    n_step_return as n_step_return,
)
from ._transition import Transition as Transition
