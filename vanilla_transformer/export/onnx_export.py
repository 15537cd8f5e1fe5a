"""A trained folder as ONNX files (`vanilla-transformer export onnx FOLDER OUT [--quantize int8]`): the encoder and
the decoder's first and later steps with its cache (`onnx_graphs.py`), their weights each stored once in one file
(`onnx_weights.py`), and beside them the tokenizer, config.json, generation_config.json, the model card and the
lexical shortlist where the folder has them. ONNX Runtime runs the folder (`translate --engine onnx`), and so does
onnxruntime-web in a browser (`export web`).

Every switch of the config exports, but the one whose graph would change with the input's length at run time:
dynamic RoPE scaling picks its rotation base from the length, a branch the trace cannot keep. It is refused by name
before anything is written.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ..common.extras import import_onnx_exporter
from ..common.model_folder import (
    ONNX_WEIGHTS_FILE,
    check_output_folder,
    load_config,
    load_model_folder,
    load_tokenizer,
)
from ..common.onnx_files import EXPORT_INFO_FILE, onnx_file_sizes
from ..lexical_shortlist import SHORTLIST_FILE
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .folder_shortlist import folder_shortlist
from .onnx_graphs import OPSET, export_graphs
from .onnx_weights import quantize_int8, write_sharing_weights

QUANTIZATIONS = ("int8",)


def unsupported_onnx_switches(config) -> list[str]:
    """The switches of `config` an ONNX export cannot express, each with its value and why."""
    problems = []
    rope_type = (config.rope_parameters or {}).get("rope_type", "default")
    if config.position_embedding_type == "rope" and rope_type == "dynamic":
        problems.append(
            "rope_parameters rope_type='dynamic' (its rotation base changes with the input's length, a branch an "
            "ONNX graph does not keep)"
        )
    return problems


def check_expressible(config) -> None:
    problems = unsupported_onnx_switches(config)
    if problems:
        raise ValueError("ONNX cannot express " + "; ".join(problems))


def export_onnx(folder: str | Path, output: str | Path, quantize: str | None = None, force: bool = False) -> Path:
    """Write `folder` (a translation model folder or Hub repo with its tokenizer) as ONNX files into `output`,
    float32 or with `quantize="int8"`; returns `output`."""
    import_onnx_exporter()
    check_quantization(quantize)
    output = Path(output)
    check_output_folder(output, folder, "model", force)
    model, tokenizer = load_exportable(folder)
    return write_onnx_export(model, tokenizer, folder, output, quantize, replace=force)


def check_quantization(quantize: str | None) -> None:
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize={quantize!r} is not one of {', '.join(QUANTIZATIONS)}")


def load_exportable(folder: str | Path):
    """The model of `folder` (eager attention: see onnx_graphs.py) and its tokenizer, once every check that refuses
    a folder has passed: a caller that has written nothing yet refuses it with nothing to undo."""
    import_onnx_exporter()
    config = load_config(folder)
    check_expressible(config)  # the switches first: a refusal should not wait for the weights
    tokenizer = load_tokenizer(folder, described_as="model")
    folder_shortlist(folder, config, tokenizer)  # the export carries it: not one of another tokenizer
    model = load_model_folder(folder, attn_implementation="eager").eval()
    if not isinstance(model, VanillaTransformerForConditionalGeneration):
        raise ValueError(f"{folder} holds a {type(model).__name__}; the ONNX export takes a translation model")
    return model, tokenizer


def write_onnx_export(
    model, tokenizer, folder: str | Path, output: Path, quantize: str | None = None, replace: bool = False
) -> Path:
    """Write `model` (loaded from `folder` by `load_exportable`) and `tokenizer` as ONNX files into `output`, which
    `replace` empties first; the card and the shortlist of `folder` travel with them."""
    with tempfile.TemporaryDirectory() as scratch:
        graphs = export_graphs(model, Path(scratch))
        if quantize == "int8":
            quantized = Path(scratch) / "int8"
            quantized.mkdir()
            for path in graphs:
                quantize_int8(path, quantized / path.name)
            graphs = [quantized / path.name for path in graphs]
        if output.exists() and replace:
            shutil.rmtree(output)
        output.mkdir(parents=True, exist_ok=True)
        write_sharing_weights(graphs, output, ONNX_WEIGHTS_FILE)
    tokenizer.save_pretrained(output)
    model.generation_config.save_pretrained(output)
    config = model.config.to_dict()
    config.pop("auto_map", None)  # no code files travel with an export: the package registers the model type
    config.pop("_attn_implementation_autoset", None)
    (output / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # each file's size, checked before the export is loaded or copied into a page: a copy cut short is named
    info = {"quantization": quantize or "float32", "opset": OPSET, "files": onnx_file_sizes(output)}
    (output / EXPORT_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    for name in ("README.md", SHORTLIST_FILE):  # the card says what the model translates
        if (Path(folder) / name).is_file():
            shutil.copyfile(Path(folder) / name, output / name)
    return output


def add_onnx_format(formats) -> None:
    """`export onnx FOLDER OUTPUT [--quantize int8] [--force]`."""
    parser = formats.add_parser(
        "onnx",
        help="ONNX files for ONNX Runtime (translate with: translate --engine onnx --model OUTPUT)",
        description="Write a translation model folder as ONNX files (the encoder, the decoder's first step and its "
        "later steps with the cache, optimum's names; each weight stored once) with its tokenizer and configs; a "
        "switch ONNX cannot express is refused by name.",
    )
    parser.add_argument("folder", help="a trained model folder (or Hub repo id) with its tokenizer")
    parser.add_argument("output", type=Path, help="the new ONNX folder")
    parser.add_argument("--quantize", choices=QUANTIZATIONS, help="int8 weights (ONNX Runtime's dynamic quantization)")
    parser.add_argument("--force", action="store_true", help="replace OUTPUT if it holds files")
    parser.set_defaults(func=_run_export_onnx)


def _run_export_onnx(args) -> int:
    output = export_onnx(args.folder, args.output, args.quantize, args.force)
    size = sum(onnx_file_sizes(output).values())
    print(f"wrote {output} (ONNX, {args.quantize or 'float32'}, {size / 2**20:.1f} MiB of graphs and weights)")
    return 0


__all__ = [
    "EXPORT_INFO_FILE",
    "QUANTIZATIONS",
    "add_onnx_format",
    "check_quantization",
    "export_onnx",
    "load_exportable",
    "unsupported_onnx_switches",
    "write_onnx_export",
]
