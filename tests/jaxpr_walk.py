"""One walker over a jaxpr's equations, for the tests that look at what a
function traces to (which primitives, which scans and how they are unrolled)."""

from collections.abc import Iterator

import jax


def equations(jaxpr) -> Iterator:
    """Every equation of `jaxpr` (a `Jaxpr` or `ClosedJaxpr`), those of its
    sub-jaxprs (scan and while bodies, conditional branches, custom rules)
    included, depth first."""
    if isinstance(jaxpr, jax.extend.core.ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    for equation in jaxpr.eqns:
        yield equation
        for value in equation.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(
                    inner, jax.extend.core.ClosedJaxpr | jax.extend.core.Jaxpr
                ):
                    yield from equations(inner)


def scan_unrolls(jaxpr) -> list[int]:
    """The `unroll` of every scan in `jaxpr`, its sub-jaxprs included."""
    return [e.params["unroll"] for e in equations(jaxpr) if e.primitive.name == "scan"]
