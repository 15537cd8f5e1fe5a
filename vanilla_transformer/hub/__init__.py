"""The Hugging Face Hub: publishing a model folder (`push`) and its model card; failing fast when it is unreachable."""

from .connection import (
    HubUnreachableError,
    from_pretrained_or_cache,
    hub_reachable,
    load_dataset_or_cache,
    offline_mode,
)
from .model_card import ModelCardResults, architecture_rows, find_template, render_model_card, save_model_card
from .push import IncompleteModelFolderError, add_push_subcommand, files_to_push, missing_model_files, push_folder

__all__ = [
    "HubUnreachableError",
    "IncompleteModelFolderError",
    "ModelCardResults",
    "add_push_subcommand",
    "architecture_rows",
    "files_to_push",
    "find_template",
    "from_pretrained_or_cache",
    "hub_reachable",
    "load_dataset_or_cache",
    "missing_model_files",
    "offline_mode",
    "push_folder",
    "render_model_card",
    "save_model_card",
]
