"""Optional packages (the extras of pyproject.toml): each imported where it is needed, or an error naming the extra
to install, which the command line prints as one line."""

from __future__ import annotations


class MissingExtraError(ImportError):
    """An optional dependency is missing: the user's setup, not a bug (the command line prints it as one line)."""


def import_ctranslate2():
    """The optional `ctranslate2` package, or an error that names the extra to install."""
    try:
        import ctranslate2
    except ImportError as error:
        raise MissingExtraError('CTranslate2 is not installed: pip install "vanilla-transformer[ct2]"') from error
    return ctranslate2


def import_gradio():
    """The optional `gradio` package (the page of `serve` and its Space), or an error that names the extra."""
    try:
        import gradio
    except ImportError as error:
        raise MissingExtraError(
            'the page needs gradio, which is not installed: pip install "vanilla-transformer[serve]"'
        ) from error
    return gradio


def import_onnxruntime():
    """The optional `onnxruntime` package (the ONNX engine), or an error that names the extra to install."""
    try:
        import onnxruntime
    except ImportError as error:
        raise MissingExtraError('ONNX Runtime is not installed: pip install "vanilla-transformer[onnx]"') from error
    return onnxruntime


def import_onnx_exporter():
    """`onnx` and `onnxscript` (torch's ONNX exporter needs both) and `onnxruntime` (its int8 quantization), or an
    error that names the extra to install."""
    try:
        import onnx
        import onnxscript  # noqa: F401 - torch.onnx.export(dynamo=True) imports it
    except ImportError as error:
        raise MissingExtraError(
            "the ONNX export needs onnx and onnxscript, which are not installed: "
            'pip install "vanilla-transformer[onnx]"'
        ) from error
    import_onnxruntime()
    return onnx


def import_sentencex():
    """The optional `sentencex` sentence segmenter (paragraphs), or an error that names the extra to install."""
    try:
        import sentencex
    except ImportError as error:
        raise MissingExtraError(
            'splitting paragraphs into sentences needs sentencex: pip install "vanilla-transformer[paragraphs]"'
        ) from error
    return sentencex


__all__ = [
    "import_sentencex",
    "MissingExtraError",
    "import_ctranslate2",
    "import_gradio",
    "import_onnx_exporter",
    "import_onnxruntime",
]
