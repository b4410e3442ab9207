import os
import sys
import warnings
from collections.abc import Mapping

import numpy as np
from jaxtyping import ArrayLike


class EntropyCollapseWarning(UserWarning):
    """The policy became (nearly) deterministic early in training.

    Silence it with `warnings.simplefilter("ignore", eqxrl.EntropyCollapseWarning)`.
    """


def check_entropy_collapse(
    metrics: Mapping[str, ArrayLike],
    *,
    fraction: float = 0.05,
    early: float = 0.1,
    warn: bool = True,
) -> int | None:
    """Find (and warn about, once) an early collapse of the policy's entropy.

    A collapse is an iteration in the first `early` part of the run whose mean
    policy entropy is below `fraction` of the largest possible entropy (that of the
    uniform distribution over the valid actions, PPO's `max_entropy` metric). A policy
    that stops exploring that early has often locked onto a poor action; with action
    masks it happens easily when few actions are valid. Remedies: a larger
    `ent_coef`, a smaller `learning_rate`, more environments.

    Needs the `entropy` and `max_entropy` metrics (discrete PPO logs both); returns
    `None` when they are absent. Metrics may have leading batch axes (vmapped seeds);
    the iteration axis is the last.

    **Arguments:**

    - `metrics`: per-iteration metrics as `train` returns them.
    - `fraction`: the collapse threshold, relative to the largest possible entropy.
    - `early`: the leading part of the run that counts as early.
    - `warn`: issue an [`EntropyCollapseWarning`][eqxrl.EntropyCollapseWarning].

    **Returns:**

    The first collapsed iteration (0-based), or `None`.
    """
    if "entropy" not in metrics or "max_entropy" not in metrics:
        return None
    entropy = np.asarray(metrics["entropy"], dtype=np.float64)
    max_entropy = np.asarray(metrics["max_entropy"], dtype=np.float64)
    num_iterations = entropy.shape[-1]
    num_early = max(1, int(np.ceil(early * num_iterations)))
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = entropy / max_entropy
    collapsed = (relative < fraction) & (max_entropy > 0)
    collapsed = collapsed.reshape(-1, num_iterations)[:, :num_early].any(axis=0)
    if not collapsed.any():
        return None
    iteration = int(np.argmax(collapsed))
    if warn:
        warnings.warn(
            EntropyCollapseWarning(
                f"Policy entropy collapsed early: at iteration {iteration} of "
                f"{num_iterations} it fell below {fraction:.0%} of the largest "
                "possible entropy over the valid actions. The policy has stopped "
                "exploring; try a larger ent_coef, a smaller learning_rate or more "
                "environments."
            ),
            stacklevel=_user_stacklevel(),
        )
    return iteration


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside eqxrl and the libraries that wrap
    its functions, so the warning points at the user's line."""
    internal = ("eqxrl", "jaxtyping", "equinox", "beartype")
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        parts = frame.f_code.co_filename.split(os.sep)
        if not any(name in parts for name in internal):
            return level
        frame = frame.f_back
        level += 1
    return 1
