"""The house plan: the package's top level is the model (the remote-code files that travel with every saved folder)
plus tokenization and the command line; every tool lives in a subpackage named for its job."""

import ast
import sys
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
