"""The package's shape: folders are the pipeline's stages and imports go one way, down it.

A module imports only from its own stage or from earlier ones; the runtime imports only the
standard library, and the rest of the package reaches it only through `tplparse.runtime`
(never a submodule or a private name); no two modules import each other, even lazily.
"""

from __future__ import annotations

import ast
import sys

import pytest

from conftest import REPO

PACKAGE = REPO / "compiler"

# Stages, in pipeline order: a module may import from its own stage and the ones before it.
STAGES = ["version", "runtime", "errors", "jsontext", "display", "spec", "source", "probe", "grammar", "emit", "check", "export", "bridge", "pipeline", "serve", "cli",
          "__init__", "__main__"]


def module_name(path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(["tplparse", *parts]) if parts != ["__init__"] else "tplparse"


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path):
    """(imported module, names, line) for every import in the file, at any depth."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            names = [alias.name for alias in node.names]
            if node.level and not node.module:  # from . import x: x is a module of that package
                found += [(f"{target}.{name}", [], node.lineno) for name in names]
            else:
                found.append((target, names, node.lineno))
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def package_module(target: str) -> str | None:
    """The package module an import names (a name imported from a package may be its module)."""
    while target and target not in MODULES:
        target = target.rsplit(".", 1)[0] if "." in target else ""
    return target or None


def test_every_module_is_in_a_stage():
    for module in MODULES:
        assert stage_of(module) in STAGES, f"{module}: not in a stage folder ({', '.join(STAGES)})"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_pipeline(module):
    stage = STAGES.index(stage_of(module))
    for target, names, line in imports_of(MODULES[module]):
        if not target.startswith("tplparse"):
            continue
        imported = package_module(target)
        assert imported is not None, f"{module}:{line} imports {target}, which is not in the package"
        target_stage = stage_of(imported)
        if stage_of(module) == "runtime":
            assert target_stage == "runtime", f"{module}:{line}: the runtime imports {imported}"
            continue
        assert STAGES.index(target_stage) <= stage, (
            f"{module}:{line} imports {imported}, a later stage ({target_stage} comes after {stage_of(module)})")
        if target_stage == "runtime":
            assert imported == "tplparse.runtime", f"{module}:{line} imports the runtime's submodule {imported}"
            private = [n for n in names if n.startswith("_")]
            assert not private, f"{module}:{line} imports private runtime names {private}"


def test_the_runtime_imports_only_the_standard_library():
    for module, path in MODULES.items():
        if stage_of(module) != "runtime":
            continue
        for target, _, line in imports_of(path):
            top = target.split(".")[0]
            assert top == "tplparse" or top in sys.stdlib_module_names, f"{module}:{line} imports {target}"


def test_no_import_cycles():
    graph = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for target, names, _ in imports_of(path):
            imported = package_module(target) if target.startswith("tplparse") else None
            if imported and imported != module:
                graph[module].add(imported)
                # `from package import name` loads package/name.py when name is a module
                graph[module] |= {f"{imported}.{n}" for n in names if f"{imported}.{n}" in MODULES}
    # A package's __init__ importing its own modules is how a package exposes them, not a cycle.
    for module in graph:
        graph[module] = {t for t in graph[module] if not (module in MODULES and MODULES[module].name == "__init__.py"
                                                           and t.startswith(module + "."))}
    state = {}

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycle = path[path.index(target):] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_runtime_states_are_the_specs():
    """The runtime (standard library only) spells states and policies as the spec's enums do."""
    from tplparse import runtime
    from tplparse.spec import Parallel, Start

    assert (runtime.CONTENT, runtime.REASONING, runtime.PARALLEL_ALL) == (Start.CONTENT, Start.REASONING, Parallel.ALL)


def test_no_runtime_function_is_over_sixty_lines():
    """Issue #30: the runtime reads in small named steps (a function longer than this is split
    into steps with a docstring each)."""
    long = []
    for module, path in MODULES.items():
        if stage_of(module) != "runtime":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long.append(f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long == []
