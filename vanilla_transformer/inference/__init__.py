"""Inference: translating with a trained model (`translate`); loading model folders with errors naming the file."""

from .loading import CorruptFileError, MissingTokenizerError, load_config, load_model_folder, load_tokenizer
from .translate import add_translate_subcommand, load_for_translation, run_translate, translate

__all__ = [
    "CorruptFileError",
    "MissingTokenizerError",
    "add_translate_subcommand",
    "load_config",
    "load_for_translation",
    "load_model_folder",
    "load_tokenizer",
    "run_translate",
    "translate",
]
