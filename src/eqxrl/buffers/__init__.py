"""Storage for experience: transitions and rollouts."""

from ._transition import Transition as Transition
