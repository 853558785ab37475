"""Measure the import graph of the llmgym package (tests excluded): rooms, floors, arrows, circles.

A *room* is a top-level module of the package (``llmgym/config.py`` is ``config``) or a folder
(``llmgym/llm/distributed/`` is ``llm/distributed``); the package's own ``__init__.py`` is the room
``llmgym``. An *arrow* is a pair of rooms where a file of the first imports a module of the second
(at module level, inside a function or under ``TYPE_CHECKING`` alike; ``importlib`` strings are not
seen). *Floors* are the levels of the room graph once its circles are merged (the longest chain of
arrows, counted in rooms). An *arrow back up* goes from a room to a room on a higher floor of the
intended layering, ``LAYERS`` of ``tests/test_import_graph.py`` (which guards it). A *circle* is a
strongly connected component of two or more files; it is *across folders* when its files lie in
more than one room.

Usage::

    python scripts/import_graph.py [PACKAGE_DIR] [--arrows]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


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
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def room_of(module: str, modules: Mapping[str, Path]) -> str:
    """The room of a module: its folder below the package, or its own name at the top level.

    Args:
        module: The dotted module name.
        modules: :func:`module_files` of the package.
    """
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

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
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


def layer_rank(room: str, layers: Sequence[Sequence[str]]) -> int | None:
    """The floor of ``room`` in ``layers`` (a room under a folder named there shares its floor); ``None``: unplaced."""
    for rank, layer in enumerate(layers):
        if any(room == name or room.startswith(name + "/") for name in layer):
            return rank
    return None


@dataclass(frozen=True)
class Graph:
    """The import graph of a package, in rooms.

    Attributes:
        rooms: Every room.
        floors: Levels of the room graph (circles merged).
        arrows: ``(from, to)`` pairs of rooms, sorted.
        back: The arrows to a higher floor of the layering.
        unplaced: Rooms the layering does not place.
        circles: Strongly connected components of two or more files (dotted names).
        across: The circles whose files lie in more than one room.
        room_imports: ``(from room, to room) -> [(importing module, imported module)]``.
    """

    rooms: list[str]
    floors: int
    arrows: list[tuple[str, str]]
    back: list[tuple[str, str]]
    unplaced: list[str]
    circles: list[list[str]]
    across: list[list[str]]
    room_imports: dict[tuple[str, str], list[tuple[str, str]]]


def measure(package: Path, layers: Sequence[Sequence[str]]) -> Graph:
    """The import graph of ``package`` against ``layers`` (lowest floor first)."""
    modules = module_files(package)
    file_graph = {m: imported_modules(m, p, modules) for m, p in modules.items()}
    rooms = {m: room_of(m, modules) for m in modules}
    room_graph: dict[str, set[str]] = {room: set() for room in rooms.values()}
    room_imports: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for module, imported in file_graph.items():
        for other in sorted(imported):
            if rooms[other] != rooms[module]:
                room_graph[rooms[module]].add(rooms[other])
                room_imports.setdefault((rooms[module], rooms[other]), []).append((module, other))
    arrows = sorted((a, b) for a, successors in room_graph.items() for b in successors)
    ranks = {room: layer_rank(room, layers) for room in room_graph}
    back = [(a, b) for a, b in arrows if (ranks[a] or 0) < (ranks[b] or 0)]
    circles = [c for c in strongly_connected(file_graph) if len(c) > 1]
    return Graph(
        rooms=sorted(room_graph),
        floors=floor_count(room_graph),
        arrows=arrows,
        back=back,
        unplaced=sorted(room for room, rank in ranks.items() if rank is None),
        circles=circles,
        across=[c for c in circles if len({rooms[m] for m in c}) > 1],
        room_imports=room_imports,
    )


def _layering() -> ModuleType:
    """``tests/test_import_graph.py``, where the intended layering is written (``LAYERS``)."""
    spec = importlib.util.spec_from_file_location(
        "test_import_graph", ROOT / "tests" / "test_import_graph.py"
    )
    if spec is None or spec.loader is None:
        raise FileNotFoundError(ROOT / "tests" / "test_import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _print(title: str, graph: Graph, show_arrows: bool) -> None:
    print(f"{title}\n")
    print("| rooms | floors | arrows | arrows back up | circles | circles across folders |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {len(graph.rooms)} | {graph.floors} | {len(graph.arrows)} | {len(graph.back)} | "
        f"{len(graph.circles)} | {len(graph.across)} |\n"
    )
    for a, b in graph.back:
        files = ", ".join(f"{m} -> {o}" for m, o in graph.room_imports[(a, b)])
        print(f"back up: {a} -> {b}  ({files})")
    for room in graph.unplaced:
        print(f"not in LAYERS: {room}")
    for circle in graph.circles:
        print(f"circle{' (across folders)' if circle in graph.across else ''}: {' <-> '.join(circle)}")
    if show_arrows:
        for a, b in graph.arrows:
            print(f"arrow: {a} -> {b}")
    print()


def main(argv: list[str] | None = None) -> None:
    """Print the table of the import graph of the package folder given (llmgym/ by default)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("package", nargs="?", default=str(ROOT / "llmgym"))
    parser.add_argument("--arrows", action="store_true", help="also list every arrow between rooms")
    args = parser.parse_args(argv)
    layering = _layering()
    package = Path(args.package).resolve()
    _print("Every file in the room it lies in:", measure(package, layering.LAYERS), args.arrows)


if __name__ == "__main__":
    main()
