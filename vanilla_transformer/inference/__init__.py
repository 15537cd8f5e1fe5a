"""Inference: translating (`translate`, int8, CTranslate2 exports); loading folders is `common`'s, re-exported."""

from ..common.model_folder import (
    CorruptFileError,
    MissingTokenizerError,
    load_config,
    load_model_folder,
    load_tokenizer,
)
from .ctranslate2_engine import load_ctranslate2
from .quantization import quantize_linear_layers
from .translate import add_translate_subcommand, load_for_translation, run_translate, translate

__all__ = [
    "CorruptFileError",
    "MissingTokenizerError",
    "add_translate_subcommand",
    "load_config",
    "load_ctranslate2",
    "load_for_translation",
    "load_model_folder",
    "load_tokenizer",
    "quantize_linear_layers",
    "run_translate",
    "translate",
]
