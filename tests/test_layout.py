"""The house plan: the package's top level is the model (the remote-code files that travel with every saved folder)
plus tokenization and the command line; every tool lives in a subpackage named for its job; and the rooms (each
subpackage, each top-level file) import each other in one direction, never in a circle.

`python tests/test_layout.py` prints the rooms floor by floor, as the check sees them."""

import ast
import sys
from collections import defaultdict
from pathlib import Path

from helpers import MODEL_CODE_FILES
from transformers.dynamic_module_utils import get_relative_import_files

import vanilla_transformer

PACKAGE = Path(vanilla_transformer.__file__).parent
# what travels to the Hub: the configuration and modeling files and everything they import, transitively
REMOTE_CODE = {
    Path(path).name
    for entry in ("configuration_vanilla_transformer.py", "modeling_vanilla_transformer.py")
    for path in [PACKAGE / entry, *get_relative_import_files(str(PACKAGE / entry))]
}
# huggingface_hub and safetensors come with transformers (it requires both)
ALLOWED_THIRD_PARTY = {"torch", "transformers", "huggingface_hub", "safetensors"}
SUBPACKAGES = {
    "common",
    "training",
    "inference",
    "corpus_translation",
    "shortlist",
    "hub",
    "visualization",
    "serve",
    "demo",
    "export",
    "convert",
    "web",
}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(relative level, module) of every import statement in a file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def test_the_remote_code_set_is_the_model():
    assert MODEL_CODE_FILES == REMOTE_CODE


def test_remote_code_imports_only_the_standard_library_torch_transformers_and_its_flat_siblings():
    for name in sorted(REMOTE_CODE):
        for level, module in imports_of(PACKAGE / name):
            where = f"{name} imports {'.' * level}{module}"
            if level:
                # a flat sibling, as save_pretrained copies it next to the modeling file
                assert level == 1 and f"{module}.py" in REMOTE_CODE, where
            else:
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY, where


def test_the_top_level_is_the_model_tokenization_and_the_command_line_and_tools_live_in_subpackages():
    modules = {path.name for path in PACKAGE.glob("*.py")}
    assert modules == REMOTE_CODE | {"__init__.py", "tokenization.py", "cli.py"}
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders == SUBPACKAGES
    for folder in SUBPACKAGES:
        docstring = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text(encoding="utf-8")))
        assert docstring and "\n" not in docstring.strip(), f"{folder}/__init__.py needs a one-line docstring"


# ---- rooms and the direction of their imports ----


def room_of(package: Path, path: Path) -> str:
    """A file's room: its subpackage, or the file itself for one at the top level."""
    parts = path.relative_to(package).parts
    return parts[0] if len(parts) > 1 else path.stem


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
    rooms = {room_of(package, path) for path in package.rglob("*.py")}
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


def test_the_rooms_import_each_other_in_one_direction():
    edges = room_imports(PACKAGE)
    found = circles(edges)
    assert not found, "\n".join(describe_circle(group, circle, edges) for group, circle in found)
    rooms = {room_of(PACKAGE, path) for path in PACKAGE.rglob("*.py")}
    print_floors(floors(edges, rooms))


def print_floors(levels: list[list[str]]) -> None:
    print("the rooms, from the bottom floor up (each imports only rooms on floors below it):")
    for level, names in enumerate(levels):
        print(f"  floor {level}: {', '.join(names)}")


def test_a_circle_of_rooms_is_found_and_the_imports_that_close_it_named(tmp_path):
    package = tmp_path / "house"
    for folder in ("low", "middle", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text("import torch\n")
    (package / "low" / "files.py").write_text("from ..model import torch\n")
    (package / "middle" / "use.py").write_text("from ..low.files import torch\n")
    (package / "high" / "top.py").write_text("from ..middle import use\n")
    edges = room_imports(package)
    assert not circles(edges)
    assert floors(edges, {"model", "low", "middle", "high", "__init__"}) == [
        ["__init__", "model"],
        ["low"],
        ["middle"],
        ["high"],
    ]

    # an import inside a function, of the room above, closes a circle
    (package / "low" / "files.py").write_text(
        "from ..model import torch\n\n\ndef late():\n    from house.high import top\n"
    )
    edges = room_imports(package)
    found = circles(edges)
    assert found == [(["high", "low", "middle"], ["high", "middle", "low", "high"])]
    assert describe_circle(*found[0], edges) == (
        "the rooms high, low, middle import each other in circles; one: "
        "high -> middle (high/top.py:1: from ..middle import use), then "
        "middle -> low (middle/use.py:1: from ..low.files import torch), then "
        "low -> high (low/files.py:5: from house.high import top)"
    )


if __name__ == "__main__":
    edges = room_imports(PACKAGE)
    print_floors(floors(edges, {room_of(PACKAGE, path) for path in PACKAGE.rglob("*.py")}))
