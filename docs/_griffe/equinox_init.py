"""Griffe extension: give `eqx.Module` subclasses the `__init__` signature that
Equinox generates for them.

Equinox turns every Module into a dataclass at class-creation time, so static analysis
sees no `__init__` and the API pages would show no signature for data containers such
as `TimeStep` or `PPO`. This extension rebuilds it from the annotated fields, the way
`dataclasses` does: fields in definition order (parents first), defaults taken from
`eqx.field(default=...)` / `default_factory=...` or a plain assignment, fields with
`init=False`, `eqx.AbstractVar`, `ClassVar` annotations and properties left out. Classes
that define `__init__` themselves (or inherit a hand-written one) are left alone.

Loaded by mkdocstrings through `extensions:` in `mkdocs.yml`; not part of the package.
"""

from __future__ import annotations

from typing import Any

import griffe

_MODULE_PATHS = {"equinox.Module", "equinox._module.Module"}
_FIELD_PATHS = {"equinox.field", "equinox._module.field", "dataclasses.field"}
_ABSTRACT_VAR_PATHS = {
    "equinox.AbstractVar",
    "equinox.AbstractClassVar",
    "equinox._module.AbstractVar",
    "equinox._module.AbstractClassVar",
}


def _canonical_path(expr: Any) -> str | None:
    return getattr(expr, "canonical_path", None)


def _is_equinox_module(class_: griffe.Class) -> bool:
    """Whether `class_` derives from `eqx.Module` (directly or through parents)."""
    for base in class_.bases:
        base_expr = base.left if isinstance(base, griffe.ExprSubscript) else base
        if _canonical_path(base_expr) in _MODULE_PATHS:
            return True
    try:
        parents = class_.mro()
    except ValueError:
        return False
    return any(_is_equinox_module(parent) for parent in parents)


def _field_arguments(attribute: griffe.Attribute) -> dict[str, Any] | None:
    """Keyword arguments of an `eqx.field(...)` value, or `None` for a plain value."""
    value = attribute.value
    if isinstance(value, griffe.ExprCall) and _canonical_path(value) in _FIELD_PATHS:
        return {
            argument.name: argument.value
            for argument in value.arguments
            if isinstance(argument, griffe.ExprKeyword)
        }
    return None


def _own_parameters(class_: griffe.Class) -> list[griffe.Parameter]:
    parameters = []
    for member in class_.members.values():
        if member.is_alias or not member.is_attribute or member.annotation is None:
            continue
        if "property" in member.labels:
            continue
        labels = member.labels
        if "class-attribute" in labels and "instance-attribute" not in labels:
            continue  # ClassVar
        annotation = member.annotation
        if isinstance(annotation, griffe.ExprSubscript):
            annotation_head = annotation.left
        else:
            annotation_head = annotation
        if _canonical_path(annotation_head) in _ABSTRACT_VAR_PATHS:
            continue
        field_arguments = _field_arguments(member)
        if field_arguments is None:
            default = member.value
        elif str(field_arguments.get("init", "True")) == "False":
            continue
        elif "default_factory" in field_arguments:
            default = griffe.ExprCall(
                function=field_arguments["default_factory"], arguments=[]
            )
        else:
            default = field_arguments.get("default")
        kind = (
            griffe.ParameterKind.keyword_only
            if field_arguments is not None
            and str(field_arguments.get("kw_only", "False")) == "True"
            else griffe.ParameterKind.positional_or_keyword
        )
        parameters.append(
            griffe.Parameter(
                member.name,
                annotation=annotation,
                kind=kind,
                default=default,
                docstring=member.docstring,
            )
        )
    return parameters


def _set_init(class_: griffe.Class) -> None:
    if class_.name.startswith("Abstract"):
        return  # never instantiated (see DESIGN.md): no constructor to show
    if "__init__" in class_.members or not _is_equinox_module(class_):
        return
    try:
        parents = list(reversed(class_.mro()))
    except ValueError:
        parents = []
    parameters: dict[str, griffe.Parameter] = {}
    for parent in [*parents, class_]:
        init = parent.members.get("__init__")
        if parent is not class_ and init is not None and init.lineno:
            return  # a hand-written __init__ upstream: Equinox keeps it
        for parameter in _own_parameters(parent):
            # Like dataclasses: a redefined field keeps its parent's position.
            parameters[parameter.name] = parameter
    ordered = sorted(
        parameters.values(),
        key=lambda p: p.kind is griffe.ParameterKind.keyword_only,
    )
    class_.set_member(
        "__init__",
        griffe.Function(
            "__init__",
            lineno=0,
            endlineno=0,
            parent=class_,
            parameters=griffe.Parameters(
                griffe.Parameter(
                    "self", kind=griffe.ParameterKind.positional_or_keyword
                ),
                *ordered,
            ),
            returns="None",
        ),
    )


def _visit(obj: griffe.Module | griffe.Class, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if isinstance(obj, griffe.Class):
        _set_init(obj)
    for member in list(obj.members.values()):
        if not member.is_alias and (member.is_module or member.is_class):
            _visit(member, seen)


class EquinoxModuleInit(griffe.Extension):
    """Add the generated `__init__` to every `eqx.Module` without its own."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _visit(pkg, set())
