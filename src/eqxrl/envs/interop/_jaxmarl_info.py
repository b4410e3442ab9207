"""JaxMARL's `infos` as `TimeStep` extras: dicts keyed by exactly the agents stacked
in the agents' order, numbers and arrays made strongly typed arrays, other leaves
dropped (used by `_jaxmarl.py`'s `FromJaxMARL`)."""

import numbers
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import PyTree

from ._common import strongly_typed


def _is_value(x: Any) -> bool:
    """Whether an info leaf is a number or an array (what a TimeStep can carry)."""
    return isinstance(x, jax.Array | np.ndarray | np.generic | numbers.Number)


def _stacked(values: list[PyTree]) -> PyTree | None:
    """Per-agent values stacked along a new leading axis, or `None` where they
    differ in structure, shape or dtype (they cannot be stacked)."""
    structures = {jtu.tree_structure(value) for value in values}
    if len(structures) != 1:
        return None
    columns = zip(*(jtu.tree_leaves(value) for value in values), strict=True)
    for column in columns:
        if len({(jnp.shape(x), jnp.result_type(x)) for x in column}) != 1:
            return None
    return jtu.tree_map(lambda *xs: jnp.stack(xs), *values)


def _info_tree(info: Any, agents: list[str]) -> PyTree | None:
    """JaxMARL's `infos` as TimeStep extras: dicts keyed by exactly the agents
    stacked in `agents` order (kept as dicts where the agents' values differ in
    shape or dtype), numbers and arrays as strongly typed arrays, other leaves
    (strings, objects) dropped (`None`)."""
    if isinstance(info, Mapping):
        converted = {}
        for key, value in info.items():
            value = _info_tree(value, agents)
            if value is not None:
                converted[key] = value
        if set(info) == set(agents) and set(converted) == set(agents):
            stacked = _stacked([converted[agent] for agent in agents])
            if stacked is not None:
                return stacked
        return converted
    if _is_value(info):
        return strongly_typed(info)
    if jtu.treedef_is_leaf(jtu.tree_structure(info)):
        return None
    return jtu.tree_map(
        lambda leaf: strongly_typed(leaf) if _is_value(leaf) else None, info
    )
