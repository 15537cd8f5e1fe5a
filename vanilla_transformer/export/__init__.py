"""Our folders in other engines' formats: CTranslate2 and ONNX (`vanilla-transformer export FORMAT`)."""

from .ctranslate2_spec import add_ctranslate2_format, build_spec, export_ctranslate2, unsupported_switches
from .onnx_export import add_onnx_format, export_onnx, unsupported_onnx_switches


def add_export_subcommand(subparsers):
    """Add `export FORMAT ...` with its ctranslate2 and onnx formats; returns the formats' subparsers, where a higher
    room adds its own (`export web`, by the command line)."""
    export = subparsers.add_parser("export", help="write a trained folder in another engine's format")
    formats = export.add_subparsers(dest="format", required=True)
    add_ctranslate2_format(formats)
    add_onnx_format(formats)
    return formats


__all__ = [
    "add_export_subcommand",
    "build_spec",
    "export_ctranslate2",
    "export_onnx",
    "unsupported_onnx_switches",
    "unsupported_switches",
]
