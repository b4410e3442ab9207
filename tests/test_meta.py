"""Package-wide rules: every Module is abstract xor final; every public name is
documented; no import cycles."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import equinox as eqx

import eqxrl


def all_modules():
    """Every module of eqxrl, except a bridge whose optional peer (gymnasium, ...)
    is not installed: such a module imports its peer at the top, and is checked
    where the peer is (the dev extras)."""
    yield eqxrl
    for info in pkgutil.walk_packages(eqxrl.__path__, "eqxrl."):
        try:
            yield importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            if error.name is None or error.name.split(".")[0] == "eqxrl":
                raise


def eqxrl_classes():
    seen = {}
    for module in all_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith("eqxrl") and issubclass(cls, eqx.Module):
                seen[cls.__qualname__, cls.__module__] = cls
    return list(seen.values())


def is_abstract(cls):
    return any(
        getattr(cls, name, ())
        for name in ("__abstractmethods__", "__abstractvars__", "__abstractclassvars__")
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


def import_graph() -> dict[str, set[str]]:
    """Every eqxrl module and the eqxrl modules it imports, read from the source:
    imports at module level and inside functions alike. `from package import name`
    imports the submodule `package.name` if there is one, else `package`; the
    parent packages that every import runs first are left out."""
    root = Path(eqxrl.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        modules[".".join(parts)] = (path, is_package)
    graph = {}
    for name, (path, is_package) in modules.items():
        package = name.split(".") if is_package else name.split(".")[:-1]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    imported.add(submodule if submodule in modules else base)
        graph[name] = {module for module in imported if module in modules} - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (its first module repeated at the end), or `None`."""
    done, path = set(), []

    def visit(module):
        path.append(module)
        for target in sorted(graph[module]):
            if target in path:
                return path[path.index(target) :] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_no_merge_conflict_markers_in_sources_or_docs():
    root = Path(__file__).parent.parent
    markers = ("<<<<<<< ", ">>>>>>> ", "=======\n")
    files = [
        path
        for folder in ("src", "docs", "tests", "benchmarks", "examples")
        for path in (root / folder).rglob("*")
        if path.suffix in {".py", ".md", ".yml", ".yaml", ".toml"}
    ]
    files += [root / "README.md", root / "CHANGELOG.md", root / "mkdocs.yml"]
    conflicted = [
        f"{path.relative_to(root)}:{number}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(True), 1)
        if line.startswith(markers)
    ]
    assert not conflicted, f"merge conflict markers at {conflicted}"


def test_find_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    graph = import_graph()
    # Imports inside functions count: the command line imports the Trainer lazily.
    assert "eqxrl.training._trainer" in graph["eqxrl.training._cli"]
    assert "eqxrl.envs.builtin" in graph["eqxrl.envs"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_test_file_has_a_row_in_the_budget_table():
    """`tests/README.md`'s budget table lists every test file (and nothing else):
    `conftest.py` starts the files in the order of its costs, and a file it does
    not know starts last, however long it is."""
    import costs

    tests = Path(__file__).parent
    assert set(costs.budget_table_costs()) == {
        path.name for path in tests.glob("test_*.py")
    }
