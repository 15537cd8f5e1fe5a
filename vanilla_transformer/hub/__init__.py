"""The Hugging Face Hub: publishing a trained model folder (`push`) and its model card, rendered from a template."""

from .model_card import ModelCardResults, architecture_rows, find_template, render_model_card, save_model_card
from .push import IncompleteModelFolderError, add_push_subcommand, files_to_push, missing_model_files, push_folder

__all__ = [
    "IncompleteModelFolderError",
    "ModelCardResults",
    "add_push_subcommand",
    "architecture_rows",
    "files_to_push",
    "find_template",
    "missing_model_files",
    "push_folder",
    "render_model_card",
    "save_model_card",
]
