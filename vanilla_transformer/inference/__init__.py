"""Inference: translating (`translate`, int8, CTranslate2 and ONNX exports); loading folders is `common`'s."""

from ..common.model_folder import (
    CorruptFileError,
    MissingTokenizerError,
    load_config,
    load_model_folder,
    load_tokenizer,
)
from .ctranslate2_engine import load_ctranslate2
from .onnx_engine import load_onnx
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
    "load_onnx",
    "load_tokenizer",
    "quantize_linear_layers",
    "run_translate",
    "translate",
]
