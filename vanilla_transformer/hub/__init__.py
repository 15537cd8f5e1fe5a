"""The Hugging Face Hub: publishing a model folder (`push`) and its model card."""

from .model_card import ModelCardResults, architecture_rows, find_template, render_model_card, save_model_card
from .push import (
    IncompleteModelFolderError,
    add_push_subcommand,
    create_repo,
    files_to_push,
    missing_model_files,
    push_folder,
)

__all__ = [
    "IncompleteModelFolderError",
    "ModelCardResults",
    "add_push_subcommand",
    "architecture_rows",
    "create_repo",
    "files_to_push",
    "find_template",
    "missing_model_files",
    "push_folder",
    "render_model_card",
    "save_model_card",
]
