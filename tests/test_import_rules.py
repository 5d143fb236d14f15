"""harness/ by concern, imports one way (docs/architecture.md, "harness/"): each package
imports only the packages beneath it, nothing but commands/ imports commands/, analysis/
(results into answers, from files alone) imports no engine code, and fileio/, the ground
floor beneath engine/ and harness/, imports neither. In csrc/, only bindings/ includes
pybind11 or Python, and nothing else includes bindings/."""

import ast
import json
import re
from pathlib import Path

from tests.helpers import in_subprocess

HARNESS = Path(__file__).resolve().parents[1] / "harness"
# What each part of harness/ may import of harness/, besides itself; errors.py is a leaf.
MAY_IMPORT = {
    "errors": set(),
    "io": {"errors"},
    "schema": set(),
    "workload": {"errors", "io", "schema", "traces"},
    "traces": {"errors", "io", "schema"},
    "record": {"errors", "io", "schema"},
    "telemetry": {"errors", "io", "schema", "record"},
    "replay": {"errors", "io", "schema", "workload", "traces", "record", "telemetry"},
    "ranks": {"errors", "io", "schema", "workload", "traces", "record", "telemetry",
              "replay"},
    "run": {"errors", "io", "schema", "workload", "traces", "record", "telemetry", "replay",
            "ranks"},
    "sweeps": {"errors", "io", "schema", "workload", "traces", "record", "telemetry",
               "replay", "ranks", "run", "analysis"},
    "serve": {"errors", "io", "schema", "workload", "traces", "record", "telemetry",
              "replay", "ranks", "run"},
    "analysis": {"errors", "io", "schema", "record"},
    "commands": {"errors", "io", "schema", "workload", "traces", "record", "telemetry",
                 "replay", "ranks", "run", "sweeps", "serve", "analysis"},
}


def part(path: Path) -> str:
    rel = path.relative_to(HARNESS)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported(path: Path):
    """Every module `path` imports, absolute (relative imports resolved), and the line."""
    package = list(path.relative_to(HARNESS.parent).parent.parts)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names = [f"{module}.{a.name}" for a in node.names] if not node.module else [module]
            yield from ((name, node.lineno) for name in names)


def test_each_part_imports_only_the_parts_beneath_it():
    broken = []
    for path in sorted(HARNESS.rglob("*.py")):
        if path.parent == HARNESS and path.stem == "__init__":
            continue
        here = part(path)
        allowed = MAY_IMPORT[here] | {here}
        for module, line in imported(path):
            parts = module.split(".")
            if parts[0] == "harness" and len(parts) > 1 and parts[1] not in allowed:
                broken.append(f"{path.relative_to(HARNESS.parent)}:{line}: {here} imports "
                              f"{module}")
    assert broken == []


def test_analysis_imports_no_engine_code():
    broken = [f"{path.relative_to(HARNESS.parent)}:{line}: {module}"
              for path in sorted((HARNESS / "analysis").rglob("*.py"))
              for module, line in imported(path) if module.split(".")[0] == "engine"]
    assert broken == []


def test_the_ground_floor_imports_neither_engine_nor_harness():
    floor = HARNESS.parent / "fileio"
    broken = [f"{path.relative_to(HARNESS.parent)}:{line}: {module}"
              for path in sorted(floor.rglob("*.py"))
              for module, line in imported(path)
              if module.split(".")[0] in ("engine", "harness", "torch")]
    assert list(floor.glob("*.py")) and broken == []


def test_only_the_bindings_include_python():
    """The core library (csrc/ but bindings/) builds without Python: it includes neither
    pybind11 nor Python.h, nor any header of bindings/ (docs/architecture.md, "csrc/")."""
    csrc = HARNESS.parent / "csrc"
    bindings = csrc / "bindings"
    broken = []
    for path in sorted(p for p in csrc.rglob("*.[ch]pp") if bindings not in p.parents):
        for line, text in enumerate(path.read_text().splitlines(), 1):
            included = re.match(r'\s*#\s*include\s*([<"])([^>"]+)[>"]', text)
            if included is None:
                continue
            bracket, name = included.groups()
            local = [path.parent / name, csrc / name] if bracket == '"' else []
            found = next((f.resolve() for f in local if f.exists()), None)
            if (name.startswith("pybind11/") or name == "Python.h"
                    or (found is not None and bindings.resolve() in found.parents)):
                broken.append(f"{path.relative_to(csrc.parent)}:{line}: {name}")
    assert list(bindings.glob("*.cpp")) and broken == []


def test_reading_results_loads_neither_torch_nor_the_core():
    """What analysis/ imports, transitively, in a fresh interpreter."""
    modules = sorted(".".join(p.relative_to(HARNESS.parent).with_suffix("").parts)
                     for p in (HARNESS / "analysis").rglob("*.py") if p.stem != "__init__")
    code = f"""
        import importlib, json, sys
        for m in {modules!r}:
            importlib.import_module(m)
        print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'engine'))))
    """
    loaded = set(json.loads(in_subprocess(code).splitlines()[-1]))
    assert loaded == set()


def test_the_parts_are_the_folders():
    """Every module of harness/ sits in a part the rules know (a new folder is added to
    MAY_IMPORT, and to docs/architecture.md's table)."""
    parts = {part(p) for p in HARNESS.rglob("*.py")} - {"__init__"}
    assert parts == set(MAY_IMPORT)


def test_no_module_imports_itself_round_a_cycle():
    """The package's modules, every import counted (those inside functions too): none
    reaches itself again, so no import is put inside a function to cut a cycle."""
    root = HARNESS.parent
    modules = {}
    for path in sorted(p for top in ("fileio", "engine", "harness")
                       for p in (root / top).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: {m for m, _ in imported(path) if m in modules and m != name
                    and not name.startswith(m + ".")}  # a package's own __init__
             for name, path in modules.items()}
    cycles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def _strongly_connected(graph):
    """Tarjan's strongly connected components of `graph` (name -> names it imports)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on.discard(component[-1])
            out.append(component)
    for v in graph:
        if v not in index:
            visit(v)
    return out
