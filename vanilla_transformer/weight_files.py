"""Naming the weights file at fault: transformers' `from_pretrained` lets safetensors' error about a truncated or
garbage file through as it is (`SafetensorError: Error while deserializing header`), naming no file.

Remote code, beside the modeling file: the standard library and transformers only (so the safetensors layout, an
8-byte header length, a JSON header and the tensors' bytes, is read here rather than with the safetensors package).
"""

import json
from pathlib import Path

from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, cached_file


class CorruptFileError(ValueError):
    """A file of a model folder that cannot be read: truncated, overwritten, or not the format its name says."""

    def __init__(self, culprit: str | Path, error: BaseException | str, remedy: str):
        self.culprit = culprit
        self.reason = " ".join(str(error).split()) or type(error).__name__
        super().__init__(f"{culprit} is corrupt or truncated ({self.reason}): {remedy}")


def is_safetensors_error(error: BaseException) -> bool:
    return type(error).__name__ == "SafetensorError"


def weights_files(name_or_path, subfolder: str = "", **hub_options) -> list[Path]:
    """The safetensors files of a local folder or of a Hub repo in the local cache: model.safetensors, or the shards
    its index names."""

    def locate(name: str) -> Path | None:
        found = cached_file(
            name_or_path,
            name,
            subfolder=subfolder,
            local_files_only=True,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **hub_options,
        )
        return Path(found) if found else None

    index = locate(SAFE_WEIGHTS_INDEX_NAME)
    if index is None:
        single = locate(SAFE_WEIGHTS_NAME)
        return [single] if single else []
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        return [index]
    return [path for path in map(locate, shards) if path is not None]


def safetensors_fault(path: Path) -> str | None:
    """Why `path` is not a whole safetensors file, or None: its header must be JSON and the tensors it lists must end
    where the file does (a file cut short ends before)."""
    size = path.stat().st_size
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        if size < 8 or length > size - 8:
            return f"a header of {length} bytes in a file of {size}"
        try:
            header = json.loads(file.read(length))
            end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
            return f"an unreadable header ({error})"
    if 8 + length + end != size:
        return f"the tensors end at byte {8 + length + end} of a file of {size}"
    return None


def corrupt_weights_file(error: BaseException, name_or_path, subfolder: str = "", **hub_options) -> CorruptFileError:
    """The error to raise instead of safetensors' `error`: it names the file at fault (or, if none is found, every
    weights file), and says what to do."""
    files = weights_files(name_or_path, subfolder, **hub_options)
    faulty = [path for path in files if safetensors_fault(path)] or files
    culprit = ", ".join(map(str, faulty)) or f"a weights file of {name_or_path}"
    return CorruptFileError(culprit, error, "save the model again or download it again")
