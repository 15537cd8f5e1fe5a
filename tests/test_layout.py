"""The house plan: the package's top level is the model (the remote-code files that travel with every saved folder)
plus tokenization and the command line; every tool lives in a subpackage named for its job; and the rooms (each
subpackage, each top-level file) import each other in one direction, never in a circle.

`python tests/test_layout.py` prints the rooms floor by floor, as the check sees them."""

import ast
import sys
from pathlib import Path

from helpers import MODEL_CODE_FILES
from house_plan import circles, describe_circle, floors, print_floors, room_imports, rooms_of
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


def test_the_rooms_import_each_other_in_one_direction():
    edges = room_imports(PACKAGE)
    found = circles(edges)
    assert not found, "\n".join(describe_circle(group, circle, edges) for group, circle in found)
    print_floors(floors(edges, rooms_of(PACKAGE)))


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
    print_floors(floors(edges, rooms_of(PACKAGE)))
