"""Measure the import graph of the llmgym package (tests excluded).

A *room* is a top-level module of the package (``llmgym/config.py`` is ``config``) or a folder
(``llmgym/llm/distributed/`` is ``llm/distributed``); the package's own ``__init__.py`` is the room
``llmgym``. An *arrow* is a pair of rooms where a file of the first imports a module of the second
(at module level, inside a function or under ``TYPE_CHECKING`` alike). *Floors* are the levels of
the room graph once its circles are merged (the longest chain of arrows, counted in rooms).
An *arrow back up* goes from a room to a room on a higher floor of the intended layering
(``LAYERS`` below, lowest first), and a *circle* is a strongly connected component of two or more
files; it is *across folders* when its files lie in more than one folder.

Usage::

    python scripts/import_graph.py [PACKAGE_DIR] [--arrows]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# The intended layering, lowest floor first: a room may import its own floor and the floors below.
# Rooms not named here sit on the floor of the first entry whose name is a prefix of theirs
# (``llm/distributed`` on ``llm``'s).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "import_path", "atomic_io", "lifetime", "stats", "testing"),
    ("config",),
    ("envs", "text_metrics"),
    ("llm",),
    ("agents",),
    ("algorithms",),
    ("integrations", "compat"),
    ("metrics", "budgets", "requirements", "checkpoint", "run_lock", "build", "evaluation"),
    ("report", "sweep", "export"),
    ("cli",),
    ("llmgym",),
)


def module_files(package: Path) -> dict[str, Path]:
    """Map each dotted module name of ``package`` (``llmgym.llm.models``) to its file."""
    modules: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(module: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The package's modules that the file of ``module`` imports anywhere in its body."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def room_of(module: str, modules: Mapping[str, Path]) -> str:
    """The room of a module: its folder below the package, or its own name at the top level."""
    path = modules[module]
    parts = module.split(".")[1:]
    if path.name == "__init__.py":
        return "/".join(parts) or "llmgym"
    return "/".join(parts[:-1]) or parts[0]


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph``, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def floor_count(graph: Mapping[str, set[str]]) -> int:
    """The number of levels of ``graph`` once each strongly connected component is one node."""
    component_of = {node: i for i, component in enumerate(strongly_connected(graph)) for node in component}
    dag: dict[int, set[int]] = {}
    for node, successors in graph.items():
        dag.setdefault(component_of[node], set()).update(
            component_of[s] for s in successors if component_of[s] != component_of[node]
        )
    depth: dict[int, int] = {}

    def level(component: int) -> int:
        if component not in depth:
            depth[component] = 1 + max((level(s) for s in dag.get(component, ())), default=0)
        return depth[component]

    return max((level(c) for c in dag), default=0)


def layer_rank(room: str) -> int:
    """The floor of ``room`` in ``LAYERS``; an unknown room is an error naming it."""
    for rank, layer in enumerate(LAYERS):
        for name in layer:
            if room == name or room.startswith(name + "/"):
                return rank
    raise KeyError(f"room {room!r} has no floor in LAYERS; add it to scripts/import_graph.py")


def measure(package: Path) -> dict[str, object]:
    """The numbers of the graph of ``package``: rooms, floors, arrows, arrows back up, circles."""
    modules = module_files(package)
    file_graph = {m: imported_modules(m, p, modules) for m, p in modules.items()}
    rooms = {m: room_of(m, modules) for m in modules}
    room_graph: dict[str, set[str]] = {room: set() for room in rooms.values()}
    for module, imported in file_graph.items():
        room_graph[rooms[module]].update(rooms[i] for i in imported if rooms[i] != rooms[module])
    arrows = sorted((a, b) for a, successors in room_graph.items() for b in successors)
    back = [(a, b) for a, b in arrows if layer_rank(b) > layer_rank(a)]
    circles = [c for c in strongly_connected(file_graph) if len(c) > 1]
    across = [c for c in circles if len({rooms[m] for m in c}) > 1]
    return {
        "rooms": len(room_graph),
        "floors": floor_count(room_graph),
        "arrows": arrows,
        "back": back,
        "circles": circles,
        "across": across,
    }


def main(argv: list[str] | None = None) -> None:
    """Print the table of the import graph of the package folder given (llmgym/ by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default=str(Path(__file__).resolve().parents[1] / "llmgym"))
    parser.add_argument("--arrows", action="store_true", help="also list every arrow between rooms")
    args = parser.parse_args(argv)
    numbers = measure(Path(args.package).resolve())
    arrows, back, circles, across = (numbers[k] for k in ("arrows", "back", "circles", "across"))
    assert isinstance(arrows, list) and isinstance(back, list)
    assert isinstance(circles, list) and isinstance(across, list)
    print("| rooms | floors | arrows | arrows back up | circles | circles across folders |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {numbers['rooms']} | {numbers['floors']} | {len(arrows)} | {len(back)} | {len(circles)} | {len(across)} |"
    )
    for a, b in back:
        print(f"back up: {a} -> {b}")
    for circle in circles:
        print(f"circle{' (across folders)' if circle in across else ''}: {' <-> '.join(circle)}")
    if args.arrows:
        for a, b in arrows:
            print(f"arrow: {a} -> {b}")


if __name__ == "__main__":
    main()
