"""Package-wide rules: every Module is abstract xor final; every public name is
documented."""

import importlib
import inspect
import pkgutil

import equinox as eqx

import eqxrl


def all_modules():
    yield eqxrl
    for info in pkgutil.walk_packages(eqxrl.__path__, "eqxrl."):
        yield importlib.import_module(info.name)


def eqxrl_classes():
    seen = {}
    for module in all_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith("eqxrl") and issubclass(cls, eqx.Module):
                seen[cls.__qualname__, cls.__module__] = cls
    return list(seen.values())


def is_abstract(cls):
    return bool(getattr(cls, "__abstractmethods__", ())) or bool(
        getattr(cls, "__abstractvars__", ())
    )


def test_every_class_is_abstract_xor_final():
    classes = eqxrl_classes()
    assert len(classes) > 10
    for cls in classes:
        named_abstract = cls.__name__.startswith("Abstract")
        assert named_abstract == is_abstract(cls), (
            f"{cls.__name__}: abstract classes are named Abstract* and only they "
            "have abstract methods or variables"
        )
        if not named_abstract:
            subclasses = [c for c in classes if c is not cls and issubclass(c, cls)]
            assert not subclasses, f"{cls.__name__} is concrete but subclassed"


def test_public_names_have_docstrings():
    packages = [
        eqxrl,
        eqxrl.envs,
        eqxrl.nn,
        eqxrl.distributions,
        eqxrl.buffers,
        eqxrl.algorithms,
        eqxrl.multiagent,
        eqxrl.training,
    ]
    for package in packages:
        for name in dir(package):
            if name.startswith("_"):
                continue
            obj = getattr(package, name)
            if inspect.ismodule(obj) or not callable(obj):
                continue
            assert inspect.getdoc(obj), f"{package.__name__}.{name} has no docstring"


def test_public_names_are_in_the_api_docs():
    from pathlib import Path

    api = Path(__file__).parent.parent / "docs" / "api"
    text = "\n".join(page.read_text() for page in api.glob("*.md"))
    packages = [
        eqxrl,
        eqxrl.envs,
        eqxrl.nn,
        eqxrl.distributions,
        eqxrl.buffers,
        eqxrl.algorithms,
        eqxrl.multiagent,
        eqxrl.training,
    ]
    for package in packages:
        for name in dir(package):
            obj = getattr(package, name)
            if name.startswith("_") or inspect.ismodule(obj) or not callable(obj):
                continue
            documented = (
                f"::: {package.__name__}.{name}\n" in text
                or f"::: eqxrl.{name}\n" in text
            )
            assert documented, f"{package.__name__}.{name} is not in docs/api"
