"""Renamed public names keep working for one release, with a warning."""

import warnings


def warn_renamed(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that `old` (a full public name) is deprecated in favour of `new`;
    `stacklevel` 3 points at the caller of the function that warns."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release: use {new}.",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
