"""The import graph of ``raydp/``: no circle, and no module importing one above it.

Every module of the package belongs to a *room* (a module, or a subpackage taken whole) and every
room has a floor. An import — at module level or inside a function, it is an import all the same —
may go to the same room or to a lower floor, never up; and no set of modules may import each other in
a circle. A new module must be given a room here (the test says so), which is the point: its place
is a decision. ARCHITECTURE.md draws the same floors.

    python tests/unit/test_architecture.py      # prints the rooms, floor by floor, with what each imports
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # not from paths: this file also runs as a script
PACKAGE = ROOT / "raydp"

# Floors, lowest first. A room is a module or a whole subpackage.
FLOORS: list[tuple[str, ...]] = [
    ("raydp._version", "raydp.errors"),
    ("raydp.validation", "raydp.fingerprint"),
    ("raydp.identity", "raydp.plan", "raydp.noise", "raydp.tables"),
    ("raydp.mechanisms", "raydp.targets", "raydp.oracles"),
    ("raydp.engine",),
    ("raydp.store", "raydp.estimate", "raydp.ledger", "raydp.seal"),
    ("raydp.options",),
    ("raydp.sampler",),
    ("raydp.release",),
    ("raydp.plots", "raydp.testing", "raydp.baselines", "raydp.local_cluster", "raydp.sklearn", "raydp.client"),
    ("raydp.serve",),
    ("raydp.cli",),
    ("raydp",),
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def room_of(module: str) -> str:
    """The longest room name that is ``module`` or one of its parents (the package face only for itself)."""
    if module == "raydp":
        return module
    parts = module.split(".")
    for i in range(len(parts), 1, -1):
        name = ".".join(parts[:i])
        if name in FLOOR:
            return name
    raise LookupError(module)


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The raydp modules ``module`` imports, anywhere in its text (function-level imports included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from raydp import noise` names a submodule; `from raydp.x import f` names the module x
            names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in known else stem for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import raydp.engine.ray` -> that module
                name = name.rpartition(".")[0]
            if name.startswith("raydp") and name and name != module:
                out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports(m, p, known) for m, p in mods.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(g.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state:
                found = visit(v)
                if found:
                    return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(g):
        if u not in state:
            found = visit(u)
            if found:
                return found
    return None


def test_every_module_has_a_room():
    homeless = []
    for m in modules():
        try:
            room_of(m)
        except LookupError:
            homeless.append(m)
    assert not homeless, f"give these modules a room in FLOORS: {homeless}"


def test_no_import_circle():
    cycle = find_cycle(graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_import_runs_up():
    upward = []
    for m, targets in graph().items():
        for t in targets:
            a, b = room_of(m), room_of(t)
            if a != b and FLOOR[b] >= FLOOR[a]:
                upward.append(f"{m} (floor {FLOOR[a]}) imports {t} (floor {FLOOR[b]})")
    assert not upward, "imports that run up or sideways:\n" + "\n".join(sorted(upward))


def test_the_checker_sees_a_circle_and_an_upward_import():
    """The checks above can fail: a planted circle and a planted upward import are found."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    g = graph()
    assert "raydp.engine.blocks" in g and "raydp.store" in g["raydp.sampler"]
    assert FLOOR[room_of("raydp.store")] > FLOOR[room_of("raydp.engine.blocks")]


if __name__ == "__main__":
    g = graph()
    by_room = defaultdict(set)
    for m, targets in g.items():
        by_room[room_of(m)] |= {room_of(t) for t in targets} - {room_of(m)}
    for i in range(len(FLOORS) - 1, -1, -1):
        for room in FLOORS[i]:
            if any(room_of(m) == room for m in g):
                print(f"floor {i:2d}  {room:22s} -> {', '.join(sorted(by_room[room])) or '-'}")
    cycle = find_cycle(g)
    print("circles: none" if cycle is None else "circle: " + " -> ".join(cycle))
    sys.exit(0 if cycle is None else 1)
