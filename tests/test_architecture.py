"""The import graph of the package keeps the floors of ARCHITECTURE.md: core -> store -> designs,
stats, bayes -> simulate -> collect -> report -> demo -> cli. Rooms are the subpackages and the
top-level modules; an arrow is any import (module level or inside a function) from one room to
another. A room imports only from floors below it, nothing imports the package face, and the
graph has no circle."""

from __future__ import annotations

import ast
from pathlib import Path

import discern_stats

PKG = Path(discern_stats.__file__).parent
FLOORS = {"core": 0, "store": 1, "designs": 2, "stats": 2, "bayes": 2, "simulate": 3, "collect": 4, "report": 5,
          "demo": 6, "cli": 7}  # the CLI runs the demo, so it sits one floor above it


def _room(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _arrows() -> set[tuple[str, str, str]]:
    """(from room, to room, file) for every relative import inside the package."""
    out = set()
    for path in PKG.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == PKG:
            continue  # the package face re-exports everything
        room = _room(path)
        pkg_parts = path.relative_to(PKG).parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(pkg_parts[:len(pkg_parts) - (node.level - 1)])
                target = base + (node.module.split(".") if node.module else [])
                if not target:  # `from .. import x`: the package face
                    out.add((room, "__init__", str(path.relative_to(PKG))))
                    continue
                to = target[0]
                if to != room:
                    out.add((room, to, str(path.relative_to(PKG))))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("discern_stats"):
                parts = node.module.split(".")
                to = parts[1] if len(parts) > 1 else "__init__"
                if to != room:
                    out.add((room, to, str(path.relative_to(PKG))))
    return out


def test_every_room_has_a_floor():
    rooms = {_room(p) for p in PKG.rglob("*.py") if p != PKG / "__init__.py"} - {"data"}
    assert rooms <= set(FLOORS), sorted(rooms - set(FLOORS))


def test_imports_go_only_down():
    bad = sorted(f"{f}: {a} (floor {FLOORS.get(a)}) imports {b} (floor {FLOORS.get(b)})"
                 for a, b, f in _arrows() if b == "__init__" or FLOORS.get(b, 99) >= FLOORS[a])
    assert not bad, "\n".join(bad)


def test_no_import_circle_between_modules():
    """No circle between modules either (e.g. stats.bootstrap <-> stats.spearman_lanes)."""
    graph: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        mod = ".".join(path.relative_to(PKG).with_suffix("").parts)
        pkg_parts = path.relative_to(PKG).parts[:-1]
        deps = graph.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(pkg_parts[:len(pkg_parts) - (node.level - 1)])
                target = ".".join(base + (node.module.split(".") if node.module else []))
                for alias in node.names:  # `from . import x` may name a module
                    sub = f"{target}.{alias.name}" if target else alias.name
                    if (PKG / (sub.replace(".", "/") + ".py")).exists():
                        deps.add(sub)
                if (PKG / (target.replace(".", "/") + ".py")).exists():
                    deps.add(target)
    deps_of = {m: {d for d in ds if d != m and not d.endswith("__init__")} for m, ds in graph.items()}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        seen[m] = 1
        stack.append(m)
        for d in deps_of.get(m, ()):
            if seen.get(d) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in seen:
                visit(d)
        stack.pop()
        seen[m] = 2

    for m in sorted(deps_of):
        if m not in seen:
            visit(m)
