"""A model folder: the names of its files; loading a saved model, its config or its tokenizer from a local folder or
a Hub repo id, with errors that name the culprit: the missing or corrupt file of a local folder, or the repo id when
the Hub cannot be reached (at once, instead of after a minute of retries; a repo in the local cache still loads);
and the checks of a folder a command writes into. An export for another engine (ONNX, CTranslate2) given where a
model folder is expected is named as such, not as a folder missing its weights.

transformers' own messages for these cases name no file (a truncated model.safetensors is a bare SafetensorError,
a folder without a tokenizer asks to install sentencepiece), so a local folder is checked before it is loaded.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from safetensors import SafetensorError, safe_open
from tokenizers import Tokenizer
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

from ..weight_files import CorruptFileError
from .hub_connection import from_pretrained_or_cache

# a Hub repo id, model or dataset: "name" or "owner/name"
HUB_ID = re.compile(r"[\w.-]+(?:/[\w.-]+)?")
TOKENIZER_FILE = "tokenizer.json"
# tokenizer.json, or a file of another tokenizer format that stands in for it
TOKENIZER_VOCABULARIES = (
    TOKENIZER_FILE,
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
)
# what an export writes beside another engine's files: our config (CTranslate2's config.json is its own)
MODEL_CONFIG_FILE = "vanilla_transformer_config.json"
# an ONNX export (`export onnx`), with optimum's names for a seq2seq model's graphs: the encoder, the decoder's first
# step (which also gives the cross-attention keys/values) and its later steps (which read the cache); the weights of
# all three in one file, each tensor stored once
ONNX_ENCODER_FILE = "encoder_model.onnx"
ONNX_DECODER_FILE = "decoder_model.onnx"
ONNX_DECODER_WITH_PAST_FILE = "decoder_with_past_model.onnx"
ONNX_GRAPH_FILES = (ONNX_ENCODER_FILE, ONNX_DECODER_FILE, ONNX_DECODER_WITH_PAST_FILE)
ONNX_WEIGHTS_FILE = "model.onnx_data"
# a CTranslate2 model (`export ctranslate2`, or CTranslate2's own converters): its weights, in its own format
CTRANSLATE2_WEIGHTS_FILE = "model.bin"
# what each engine's export is called; `export ENGINE` writes it
EXPORTS = {"onnx": "an ONNX export", "ctranslate2": "a CTranslate2 export"}
_TOKENIZER_JSON_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
_SAVE_MODEL_AGAIN = "save the model again or download it again"
_SAVE_TOKENIZER_AGAIN = "save the tokenizer again (tokenizer.save_pretrained) or download it again"


class MissingTokenizerError(FileNotFoundError):
    """A folder without any tokenizer file."""


class ExportGivenError(ValueError):
    """An engine's export (`EXPORTS`) where a model folder, with the weights PyTorch loads, is expected."""

    def __init__(self, folder: str | os.PathLike, engine: str):
        self.folder, self.engine = folder, engine
        super().__init__(
            f"{folder} is {EXPORTS[engine]} (`export {engine}` wrote it), not a model folder: give the trained model "
            "folder it was exported from"
        )


def load_model_folder(
    name_or_path: str | os.PathLike, *, model_class=AutoModelForSeq2SeqLM, **kwargs
) -> PreTrainedModel:
    """`model_class.from_pretrained(name_or_path, **kwargs)`; a local folder is checked first (config.json and the
    weights present and readable), a Hub repo id fails at once when the Hub is unreachable and not cached."""
    folder = _local_folder(name_or_path, "model")
    if folder is None:
        try:
            return from_pretrained_or_cache(model_class, str(name_or_path), "model", **kwargs)
        except CorruptFileError as error:  # a file of the Hub cache, cut short by an interrupted download, say
            remedy = "download it again with from_pretrained(..., force_download=True)"
            culprit = f"a weights file of {name_or_path} in the Hub cache"
            raise CorruptFileError(culprit, f"{error.culprit}: {error.reason}", remedy) from error
    check_not_an_export(folder)
    check_config_file(folder)
    check_weight_files(folder)
    return model_class.from_pretrained(folder, **kwargs)


def load_config(name_or_path: str | os.PathLike, **kwargs) -> PretrainedConfig:
    """`AutoConfig.from_pretrained(name_or_path, **kwargs)`, with the checks of `load_model_folder` for config.json."""
    folder = _local_folder(name_or_path, "model")
    if folder is None:
        return from_pretrained_or_cache(AutoConfig, str(name_or_path), "model", **kwargs)
    check_not_an_export(folder)
    check_config_file(folder)
    return AutoConfig.from_pretrained(folder, **kwargs)


def load_tokenizer(
    name_or_path: str | os.PathLike, *, described_as: str = "tokenizer", **kwargs
) -> PreTrainedTokenizerBase:
    """`AutoTokenizer.from_pretrained(name_or_path, **kwargs)`; a local folder is checked first (a tokenizer file
    present, its JSON files readable), a Hub repo id fails at once when the Hub is unreachable and not cached.
    `described_as` names what the user asked for in those errors ("model" when the tokenizer comes with one)."""
    path = Path(name_or_path)
    if path.is_file():  # transformers' business (some tokenizers load from a single vocabulary file)
        return AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    folder = _local_folder(name_or_path, described_as)
    if folder is None:
        return from_pretrained_or_cache(AutoTokenizer, str(name_or_path), described_as, **kwargs)
    check_tokenizer_files(folder)
    return AutoTokenizer.from_pretrained(folder, **kwargs)


def _local_folder(name_or_path: str | os.PathLike, described_as: str) -> Path | None:
    """The folder `name_or_path` names, or None for a Hub repo id."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if path.exists():
        raise NotADirectoryError(f"{path} is a file, not a {described_as} folder: pass the folder that holds it")
    if _is_hub_id(str(name_or_path)):
        return None
    raise FileNotFoundError(
        f"{name_or_path}: no such {described_as} folder (nor a Hub repo id, which is NAME or OWNER/NAME)"
    )


def _is_hub_id(name: str) -> bool:
    """Whether `name` can be a Hub repo id; "./model" or "../model", say, is a local path however it is spelt."""
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return HUB_ID.fullmatch(name) is not None


def export_engine(folder: str | os.PathLike) -> str | None:
    """The engine whose export the local folder `folder` is ("onnx", "ctranslate2"); None for a model folder (weights
    PyTorch loads, whatever else lies beside them), a Hub repo id or a folder of neither kind."""
    folder = Path(folder)
    if not folder.is_dir() or _has_model_weights(folder):
        return None
    if any((folder / name).is_file() for name in ONNX_GRAPH_FILES):
        return "onnx"
    if (folder / CTRANSLATE2_WEIGHTS_FILE).is_file():
        return "ctranslate2"
    return None


def check_not_an_export(folder: Path) -> None:
    """A folder an export command wrote is refused as such: its config.json is CTranslate2's own or its weights are
    not PyTorch's, and "no model.safetensors" would send the user to save a model into it."""
    engine = export_engine(folder)
    if engine is not None:
        raise ExportGivenError(folder, engine)


def _has_model_weights(folder: Path) -> bool:
    return any(
        (folder / name).is_file()
        for name in (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
    )


def check_config_file(folder: Path) -> None:
    """config.json is there and is JSON."""
    if not (folder / CONFIG_NAME).is_file():
        raise FileNotFoundError(
            f"{folder} has no {CONFIG_NAME}, so it is no saved model folder: model.save_pretrained({str(folder)!r}) "
            "writes one"
        )
    read_json(folder / CONFIG_NAME, _SAVE_MODEL_AGAIN)


def check_weight_files(folder: Path, remedy: str = _SAVE_MODEL_AGAIN) -> None:
    """The weights are there: model.safetensors, or the shards its index names, each with a readable header that
    covers the whole file (a truncated file fails here, at the cost of reading its header), or a PyTorch .bin.
    `remedy` ends the message of a corrupt file."""
    index_file = folder / SAFE_WEIGHTS_INDEX_NAME
    if index_file.is_file():
        index = read_json(index_file, _SAVE_MODEL_AGAIN)
        try:
            shards = sorted(set(index["weight_map"].values()))
        except (KeyError, TypeError, AttributeError) as error:
            raise CorruptFileError(index_file, f"no weight_map: {error!r}", _SAVE_MODEL_AGAIN) from error
        missing = [shard for shard in shards if not (folder / shard).is_file()]
        if missing:
            raise FileNotFoundError(
                f"{folder} lacks {', '.join(missing)} of the weight shards {SAFE_WEIGHTS_INDEX_NAME} names: "
                "copy them there, or save the model again"
            )
    elif (folder / SAFE_WEIGHTS_NAME).is_file():
        shards = [SAFE_WEIGHTS_NAME]
    elif (folder / WEIGHTS_NAME).is_file() or (folder / WEIGHTS_INDEX_NAME).is_file():
        return  # PyTorch pickles: transformers names the file of a broken one
    else:
        raise FileNotFoundError(
            f"{folder} has no {SAFE_WEIGHTS_NAME} (the model's weights): save them there with "
            f"model.save_pretrained({str(folder)!r})"
        )
    for shard in shards:
        try:
            with safe_open(folder / shard, framework="pt"):
                pass
        except SafetensorError as error:
            raise CorruptFileError(folder / shard, error, remedy) from error


def check_tokenizer_files(folder: Path) -> None:
    """A tokenizer file is there, and tokenizer.json and the JSON files AutoTokenizer reads are readable."""
    if not any((folder / name).is_file() for name in TOKENIZER_VOCABULARIES):
        raise MissingTokenizerError(
            f"{folder} holds no tokenizer ({TOKENIZER_FILE}): save one with tokenizer.save_pretrained({str(folder)!r})"
        )
    tokenizer_file = folder / TOKENIZER_FILE
    if tokenizer_file.is_file():
        try:
            Tokenizer.from_str(tokenizer_file.read_text(encoding="utf-8"))
        except OSError:
            raise  # unreadable rather than corrupt, and its message names the file
        except Exception as error:  # tokenizers raises a bare Exception for anything it cannot parse
            raise CorruptFileError(tokenizer_file, error, _SAVE_TOKENIZER_AGAIN) from error
    for name in _TOKENIZER_JSON_FILES:
        if (folder / name).is_file():
            read_json(folder / name, _SAVE_TOKENIZER_AGAIN)
    if (folder / CONFIG_NAME).is_file():  # AutoTokenizer reads it too, for the tokenizer class
        read_json(folder / CONFIG_NAME, _SAVE_MODEL_AGAIN)


def holds(folder: Path, source: str | Path) -> bool:
    """Whether `folder` is the local folder `source` or a folder above it (a Hub id is in no folder)."""
    resolved = Path(source).resolve()
    return resolved.exists() and (folder.resolve() == resolved or folder.resolve() in resolved.parents)


def check_output_folder(output: Path, source: str | Path, described_as: str, force: bool) -> None:
    """`output` may be written from `source`: not a file, empty unless `force`, and not the source or a folder above
    it (which --force would delete before it is read)."""
    if holds(output, source):
        raise ValueError(f"the output folder {output} holds the {described_as} folder {source}: choose another output")
    if output.exists() and not output.is_dir():
        raise NotADirectoryError(f"{output} is a file, not a folder")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise FileExistsError(f"{output} is not empty: choose a new folder, or pass --force to replace it")


def read_json(path: Path, remedy: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise CorruptFileError(path, error, remedy) from error


__all__ = [
    "CTRANSLATE2_WEIGHTS_FILE",
    "EXPORTS",
    "HUB_ID",
    "MODEL_CONFIG_FILE",
    "ONNX_DECODER_FILE",
    "ONNX_DECODER_WITH_PAST_FILE",
    "ONNX_ENCODER_FILE",
    "ONNX_GRAPH_FILES",
    "ONNX_WEIGHTS_FILE",
    "TOKENIZER_FILE",
    "TOKENIZER_VOCABULARIES",
    "CorruptFileError",
    "ExportGivenError",
    "MissingTokenizerError",
    "check_config_file",
    "check_not_an_export",
    "check_output_folder",
    "check_tokenizer_files",
    "check_weight_files",
    "export_engine",
    "holds",
    "load_config",
    "load_model_folder",
    "load_tokenizer",
    "read_json",
]
