"""Shape-only checks remembered by what they depend on.

Building an algorithm checks its environment and network from shapes alone
(`eqx.filter_eval_shape`): a Python trace of `reset`, `step`, the network's
construction and its call, tens of milliseconds for a small environment and more
for a large one. The same checks recur with the same answers: a multi-agent
algorithm rebuilds its per-agent learner wherever it needs it (MAPPO's `learner`,
on every access), and a sweep builds many algorithms of one environment. A trace's
result depends only on the Python objects traced (the functions, the modules' static
fields, every non-array leaf) and on the arrays' shapes and dtypes, never on their
values: that is the key a successful check is remembered by. A failing check raises
again each time (nothing is remembered), so an error always names its cause.
"""

import collections
import functools
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar

import equinox as eqx
import jax

Params = ParamSpec("Params")
Result = TypeVar("Result")

# Entries hold shapes and Python objects, never arrays.
_MAX_ENTRIES = 512
_MISSING = object()


def _abstract_leaf(leaf: Any) -> Any:
    if eqx.is_array(leaf):
        return (tuple(leaf.shape), str(leaf.dtype), getattr(leaf, "weak_type", False))
    return leaf


def shape_key(*args: Any) -> Hashable | None:
    """What a shape-only trace of `args` can depend on, hashable: their tree
    structure (modules' static fields included), each non-array leaf, and each
    array's shape, dtype and weak type, with the dtype configuration a trace reads.
    `None` where something in `args` is not hashable."""
    leaves, structure = jax.tree.flatten(args)
    key = (
        structure,
        tuple(_abstract_leaf(leaf) for leaf in leaves),
        jax.config.jax_numpy_dtype_promotion,
        jax.config.jax_enable_x64,
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def memoized_on_shapes(function: Callable[Params, Result]) -> Callable[Params, Result]:
    """`function` (a check that traces its arguments for their shapes only),
    returning the result of an earlier call whose arguments had the same
    `shape_key`: their structure, non-array leaves and arrays' shapes and dtypes.
    Only successful calls are remembered, up to `_MAX_ENTRIES` (least recently used
    first out). Its result is shared between callers: shapes, not arrays, that no
    caller changes."""
    remembered: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()

    @functools.wraps(function)
    def wrapper(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        key = shape_key(args, kwargs)
        if key is None:
            return function(*args, **kwargs)
        try:
            # Equal keys may still fail to compare (a static field whose `==`
            # raises): then the check simply runs.
            result = remembered.get(key, _MISSING)
        except Exception:
            return function(*args, **kwargs)
        if result is not _MISSING:
            remembered.move_to_end(key)
            return result
        result = function(*args, **kwargs)
        remembered[key] = result
        if len(remembered) > _MAX_ENTRIES:
            remembered.popitem(last=False)
        return result

    return wrapper
