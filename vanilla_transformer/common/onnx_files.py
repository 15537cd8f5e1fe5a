"""The files of an ONNX export (`export onnx`): their sizes, recorded in the export's manifest when it is written,
and checked before ONNX Runtime or a page reads them.

A weights file cut short (an interrupted copy) otherwise shows as ONNX Runtime failing to load the first graph, with
its internal message about an external initializer's offset, or, copied into a page by `export web`, as a page that
fails in the browser. The check names the damaged file, its size and the size it should have. An export from before
the sizes were recorded is checked against its graphs instead: its weights file must reach the end of every tensor
they point into (onnx reads their external-data offsets and lengths without reading the data).
"""

from __future__ import annotations

from pathlib import Path

from ..weight_files import CorruptFileError
from .model_folder import ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE, read_json

EXPORT_INFO_FILE = "onnx_export.json"
ONNX_FILES = (*ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE)
_WRITE_AGAIN = "copy the export again, or write it again with vanilla-transformer export onnx FOLDER OUTPUT"


def onnx_file_sizes(folder: Path) -> dict[str, int]:
    """The size of each of the export's graphs and of its weights file, as its manifest records them."""
    return {name: (folder / name).stat().st_size for name in ONNX_FILES}


def check_onnx_files(folder: Path) -> None:
    """Each graph and the weights file of the export `folder` is there and of the size the export wrote (its
    manifest's sizes; an older export's weights file: as long as its graphs need); else an error naming the file."""
    folder = Path(folder)
    missing = [name for name in ONNX_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"the ONNX export {folder} lacks {', '.join(missing)}: {_WRITE_AGAIN}")
    recorded = _recorded_sizes(folder)
    for name, size in recorded.items():
        found = (folder / name).stat().st_size
        if found != size:
            reason = f"it holds {found:,} bytes, and the export wrote {size:,}"
            raise CorruptFileError(folder / name, reason, _WRITE_AGAIN)
    if not recorded:
        _check_weights_reach_every_tensor(folder)


def read_export_info(folder: Path) -> dict:
    """The export's manifest: its quantization, opset and files (by name, with their sizes); {} where it has none."""
    info_file = Path(folder) / EXPORT_INFO_FILE
    info = read_json(info_file, _WRITE_AGAIN) if info_file.is_file() else {}
    return info if isinstance(info, dict) else {}


def _recorded_sizes(folder: Path) -> dict[str, int]:
    """The sizes the manifest records; none for an export written before they were (its "files" a list of names)."""
    files = read_export_info(folder).get("files")
    if not isinstance(files, dict):
        return {}
    return {name: size for name, size in files.items() if name in ONNX_FILES and isinstance(size, int)}


def _check_weights_reach_every_tensor(folder: Path) -> None:
    """An export without recorded sizes: its weights file reaches the end of every tensor the graphs point into."""
    try:
        import onnx
        from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    except ImportError:
        return  # ONNX Runtime alone, without onnx: its own message, naming the graph, is all there is
    weights = folder / ONNX_WEIGHTS_FILE
    needed, pointing = 0, None
    for name in ONNX_GRAPH_FILES:
        try:
            graph = onnx.load(str(folder / name), load_external_data=False).graph
        except Exception as error:  # protobuf's DecodeError and its kin: the graph file itself is damaged
            raise CorruptFileError(folder / name, error, _WRITE_AGAIN) from error
        # the export points only initializers of the main graph into the weights file
        for tensor in graph.initializer:
            if uses_external_data(tensor):
                info = ExternalDataInfo(tensor)
                end = (info.offset or 0) + (info.length or 0)
                if info.location == ONNX_WEIGHTS_FILE and end > needed:
                    needed, pointing = end, name
    found = weights.stat().st_size
    if found < needed:
        reason = f"it holds {found:,} bytes, and {pointing} reads up to byte {needed:,}"
        raise CorruptFileError(weights, reason, _WRITE_AGAIN)


__all__ = ["EXPORT_INFO_FILE", "ONNX_FILES", "check_onnx_files", "onnx_file_sizes", "read_export_info"]
