"""The package's rooms and the direction of their imports: each subpackage and each top-level file is a room, and
the rooms import each other in one direction, floor by floor. tests/test_layout.py checks the package with these
functions, and the documentation's layout page (docs/page_tools.py) shows the floors they find."""

import ast
from collections import defaultdict
from pathlib import Path


def room_of(package: Path, path: Path) -> str:
    """A file's room: its subpackage, or the file itself for one at the top level."""
    parts = path.relative_to(package).parts
    return parts[0] if len(parts) > 1 else path.stem


def rooms_of(package: Path) -> set[str]:
    return {room_of(package, path) for path in package.rglob("*.py")}


def imported_modules(package: Path, path: Path) -> list[tuple[str, str]]:
    """(absolute dotted module, "line: the statement") of every import of `path` at any depth; `from PACKAGE import
    room` gives PACKAGE.room."""
    parts = list(path.relative_to(package).parts)
    here = [package.name, *parts[:-1]]  # the package the file is in
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, f"{node.lineno}: {ast.unparse(node)}") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module == package.name:  # `from .. import room`: each name is a room
                found += [(f"{module}.{alias.name}", f"{node.lineno}: {ast.unparse(node)}") for alias in node.names]
            else:
                found.append((module, f"{node.lineno}: {ast.unparse(node)}"))
    return found


def room_imports(package: Path) -> dict[tuple[str, str], list[str]]:
    """{(room, room it imports): ["file:line: the import statement", ...]} between different rooms of `package`."""
    rooms = rooms_of(package)
    edges = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        room = room_of(package, path)
        for module, statement in imported_modules(package, path):
            names = module.split(".")
            where = f"{path.relative_to(package).as_posix()}:{statement}"
            inside = names[0] == package.name and len(names) > 1 and names[1] in rooms and names[1] != room
            if inside and where not in edges[room, names[1]]:
                edges[room, names[1]].append(where)
    return dict(edges)


def circles(edges: dict[tuple[str, str], list[str]]) -> list[tuple[list[str], list[str]]]:
    """Each group of rooms that reach each other through imports (Tarjan's strongly connected components): (its rooms,
    one circle through them: [room, room it imports, ..., back to the first])."""
    graph = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(room):
        index[room] = low[room] = len(index)
        stack.append(room)
        on_stack.add(room)
        for target in sorted(graph[room]):
            if target not in index:
                visit(target)
                low[room] = min(low[room], low[target])
            elif target in on_stack:
                low[room] = min(low[room], index[target])
        if low[room] == index[room]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == room:
                    break
            if len(group) > 1:
                groups.append(group)

    for room in sorted(graph):
        if room not in index:
            visit(room)
    return [(sorted(group), _circle_through(graph, group)) for group in groups]


def _circle_through(graph, group: set[str]) -> list[str]:
    """A shortest path from the group's first room back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for room in frontier:
            for target in sorted(graph[room] & group):
                if target == start:
                    return [*paths[room], start]
                if target not in paths:
                    paths[target] = [*paths[room], target]
                    following.append(target)
        frontier = following
    raise AssertionError("a strongly connected group always holds a circle")


def describe_circle(group: list[str], circle: list[str], edges: dict[tuple[str, str], list[str]]) -> str:
    steps = [f"{a} -> {b} ({'; '.join(edges[a, b])})" for a, b in zip(circle, circle[1:], strict=False)]
    return f"the rooms {', '.join(group)} import each other in circles; one: " + ", then ".join(steps)


def floors(edges: dict[tuple[str, str], list[str]], rooms: set[str]) -> list[list[str]]:
    """The rooms floor by floor from the bottom: a room's floor is one above the highest room it imports."""
    floor = {}

    def height(room, seen=()):
        if room not in floor:
            below = [target for (source, target) in edges if source == room]
            floor[room] = 1 + max((height(target, (*seen, room)) for target in below), default=-1)
        return floor[room]

    for room in rooms:
        height(room)
    return [sorted(room for room in rooms if floor[room] == level) for level in range(max(floor.values()) + 1)]


def print_floors(levels: list[list[str]]) -> None:
    print("the rooms, from the bottom floor up (each imports only rooms on floors below it):")
    for level, names in enumerate(levels):
        print(f"  floor {level}: {', '.join(names)}")
