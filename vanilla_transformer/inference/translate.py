"""Translate text with a trained model: the one-liner that transformers 5 no longer has as a pipeline, and the
`vanilla-transformer translate` command.

```python
from vanilla_transformer.inference import load_for_translation, translate

model, tokenizer = load_for_translation("my-model")  # a local folder or a Hub repo id
translate(model, tokenizer, ["Ein Hund rennt.", "", "Zwei Männer spielen Fußball."])
```
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..common.extras import import_sentencex
from ..common.model_folder import EXPORTS, export_engine, load_model_folder, load_tokenizer
from ..common.paragraphs import translate_paragraphs
from ..lexical_shortlist import LexicalShortlist
from ..tokenization import iter_lines, tokenizer_identity
from .ctranslate2_engine import load_ctranslate2
from .onnx_engine import load_onnx
from .quantization import QUANTIZATIONS, quantize_linear_layers

DEFAULT_NUM_BEAMS = 5
BATCH_SIZE = 32  # sentences a batch on the CPU, where a batch's time grows with its size anyway
# On a GPU a batch is cut by its tokens instead: sentences x longest source x beams, at most this many. A sentence
# count would leave a GPU idle on short sentences and run out of memory on long ones.
GPU_BATCH_TOKENS = 16384
# Input limit of models whose positions work at any length (sinusoidal, rotary): generous, but it keeps a stray
# megabyte-long line from exhausting memory.
DEFAULT_MAX_INPUT_TOKENS = 1024
# Without a max_new_tokens from the caller or the generation config, a translation may be this much longer than
# its source in tokens (the paper: "maximum output length to input length + 50").
EXTRA_OUTPUT_TOKENS = 50
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ENGINES = ("pytorch", "ctranslate2", "onnx")


def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    batch_size: int | None = None,
    max_input_tokens: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
    shortlist: bool = False,
    max_batch_tokens: int | None = None,
) -> list[str]:
    """Translate `texts` with `model.generate`; the translations come back in the order of `texts`.

    - Sentences are sorted by length into batches of at most `batch_size` sentences (default: 32 on the CPU, no
      count on a GPU) and `max_batch_tokens` tokens, counted as sentences x longest source x beams (default: none
      on the CPU, GPU_BATCH_TOKENS on a GPU), so little compute goes to padding and a GPU gets work enough.
    - An empty or whitespace-only text gives "" without reaching the model.
    - A text of more than `max_input_tokens` tokens (default: `max_position_embeddings` for learned positions,
      else 1024) is truncated, with a warning naming its line number (1-based), instead of failing.
    - `num_beams` and `max_new_tokens` default to the model's generation config; without them there, to 5 beams
      and "source length + 50" tokens (per sentence: sentences then share a batch only with sentences of their
      own length, so a translation never depends on its batch). Every other generation setting (length penalty,
      early stopping, ...) comes from `model.generation_config`.
    - `device`: where to run (the model is moved there); None keeps the model where it is.
    - `shortlist=True`: decode with the model folder's lexical shortlist (`vanilla-transformer shortlist` builds one):
      each batch's generator computes only the rows its source tokens' candidates allow.
    """
    return _translate(
        model,
        tokenizer,
        texts,
        num_beams=num_beams,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        max_input_tokens=max_input_tokens,
        device=device,
        progress=progress,
        shortlist=shortlist,
        max_batch_tokens=max_batch_tokens,
    )


def check_shortlist(model, tokenizer) -> LexicalShortlist:
    """The shortlist `model` decodes with (its folder's, or the one set on it), checked as every command and the
    service check it before any work: readable, the model's vocabulary, and `tokenizer`'s ids (another tokenizer of
    the same size means other tokens)."""
    if not hasattr(model, "shortlist"):
        raise ValueError(f"shortlist=True needs one of this package's models, not a {type(model).__name__}")
    shortlist = model.shortlist()
    shortlist.check_tokenizer(tokenizer_identity(tokenizer), "the model's tokenizer")
    return shortlist


def _translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    num_beams: int | None,
    max_new_tokens: int | None,
    batch_size: int | None,
    max_input_tokens: int | None,
    device: str | torch.device | None,
    progress: bool,
    line_names: Sequence[str] | None = None,
    on_batch: Callable[[int], None] | None = None,
    shortlist: bool = False,
    max_batch_tokens: int | None = None,
) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("translate() takes a list of texts, not a single string: wrap it as [text]")
    check_options(num_beams, max_new_tokens, batch_size, max_input_tokens, max_batch_tokens)
    if shortlist:  # before any work
        check_shortlist(model, tokenizer)
    config, generation_config = model.config, model.generation_config
    num_beams = num_beams or generation_config.num_beams or DEFAULT_NUM_BEAMS
    max_new_tokens = max_new_tokens or generation_config.max_new_tokens
    # A generation config that limits the total length instead is honoured by generate() itself.
    limit_by_source = max_new_tokens is None and generation_config.max_length is None
    learned = getattr(config, "position_embedding_type", None) == "learned"
    max_positions = getattr(config, "max_position_embeddings", None) if learned else None
    if max_input_tokens is None:
        max_input_tokens = max_positions or DEFAULT_MAX_INPUT_TOKENS
    if max_positions is not None and max_new_tokens is not None and max_new_tokens > max_positions:
        # the decoder's learned position table has no row past max_position_embeddings
        max_new_tokens = max_positions

    results = [""] * len(texts)
    todo = [index for index, text in enumerate(texts) if text.strip()]
    if not todo:
        return results
    encoded = tokenizer([texts[index] for index in todo], add_special_tokens=True)["input_ids"]
    token_ids = {
        index: _truncate(ids, max_input_tokens, tokenizer.eos_token_id)
        for index, ids in zip(todo, encoded, strict=True)
    }
    too_long = [(index, len(ids)) for index, ids in zip(todo, encoded, strict=True) if len(ids) > max_input_tokens]
    if too_long:
        names = line_names or [f"line {index + 1}" for index in range(len(texts))]
        listed = ", ".join(f"{names[index]} ({length} tokens)" for index, length in too_long[:10])
        more = f" and {len(too_long) - 10} more" if len(too_long) > 10 else ""
        warnings.warn(
            f"{len(too_long)} input(s) longer than max_input_tokens={max_input_tokens} were truncated to "
            f"{max_input_tokens} tokens: {listed}{more}",
            stacklevel=3,
        )

    if device is not None:
        model.to(device)
    device = model.device
    on_gpu = device.type == "cuda"
    if batch_size is None:
        batch_size = len(todo) if on_gpu else BATCH_SIZE
    if max_batch_tokens is None and on_gpu:
        max_batch_tokens = GPU_BATCH_TOKENS
    was_training = model.training
    model.eval()
    bar = tqdm(total=len(todo), unit="sent", file=sys.stderr, disable=not progress, desc="translating")
    try:
        batches = _length_batches(
            todo, token_ids, batch_size, split_on_length=limit_by_source, max_tokens=max_batch_tokens, beams=num_beams
        )
        for batch in batches:
            inputs = tokenizer.pad({"input_ids": [token_ids[index] for index in batch]}, return_tensors="pt")
            limit = max_new_tokens
            if limit_by_source:
                limit = len(token_ids[batch[0]]) + EXTRA_OUTPUT_TOKENS
                limit = min(limit, max_positions) if max_positions is not None else limit
            with torch.inference_mode():
                generated = model.generate(
                    input_ids=inputs["input_ids"].to(device),
                    attention_mask=inputs["attention_mask"].to(device),
                    num_beams=num_beams,
                    num_return_sequences=1,
                    **({"max_new_tokens": limit} if limit is not None else {}),
                    **({"use_shortlist": True} if shortlist else {}),
                )
            decoded = tokenizer.batch_decode(generated, skip_special_tokens=True)
            for index, text in zip(batch, decoded, strict=True):
                results[index] = text.strip()
            bar.update(len(batch))
            if on_batch is not None:  # a caller's own progress (translate-corpus counts a whole corpus)
                on_batch(len(batch))
    finally:
        bar.close()
        model.train(was_training)
    return results


def check_options(
    num_beams: int | None,
    max_new_tokens: int | None,
    batch_size: int | None,
    max_input_tokens: int | None,
    max_batch_tokens: int | None = None,
):
    """Checked before a model is loaded: a wrong number should not wait for the model to be read."""
    for name, value in (("batch_size", batch_size), ("max_batch_tokens", max_batch_tokens)):
        if value is not None and value < 1:
            raise ValueError(f"{name}={value} must be a positive integer")
    for name, value in (("num_beams", num_beams), ("max_new_tokens", max_new_tokens)):
        if value is not None and value < 1:
            raise ValueError(f"{name}={value} must be a positive integer (or None for the generation config's)")
    if max_input_tokens is not None and max_input_tokens < 1:
        raise ValueError(f"max_input_tokens={max_input_tokens} must be a positive integer")


def check_engine(model: str | Path, engine: str) -> None:
    """Another engine's export given to `engine` is refused naming the engine that runs it (`--engine`), before
    anything loads; a folder of no export is each engine's own to check."""
    found = export_engine(model)
    if found is not None and found != engine:
        raise ValueError(f"--model {model} is {EXPORTS[found]} (`export {found}` wrote it): pass --engine {found}")


def check_onnx_options(quantize: str | None, dtype: str | None, device: str | None, shortlist: bool = False) -> None:
    """What the ONNX engine does not take: its precision is the export's, its device the CPU."""
    if quantize or dtype:
        raise ValueError(
            "--engine onnx runs the export as it was written: for int8, export it with "
            "`vanilla-transformer export onnx FOLDER OUT --quantize int8` (no --quantize or --dtype here)"
        )
    if device not in (None, "cpu"):
        raise ValueError(f"--engine onnx runs on the CPU with ONNX Runtime, not --device {device}")
    if shortlist:
        raise ValueError("--engine onnx decodes with the whole vocabulary: --shortlist takes the pytorch engine")


def _truncate(ids: list[int], max_tokens: int, eos_token_id: int | None) -> list[int]:
    """Cut to `max_tokens`, keeping the end-of-sequence token the encoder was trained to see last."""
    if len(ids) <= max_tokens:
        return ids
    if eos_token_id is not None and ids[-1] == eos_token_id and max_tokens > 1:
        return [*ids[: max_tokens - 1], eos_token_id]
    return ids[:max_tokens]


def _length_batches(
    indices: list[int],
    token_ids: dict[int, list[int]],
    batch_size: int,
    split_on_length: bool,
    max_tokens: int | None = None,
    beams: int = 1,
) -> Iterable[list[int]]:
    """Longest first (a batch that runs out of memory does so at once); ties keep their input order. With
    `max_tokens`, a batch's sentences x its longest source x `beams` stays within it (a longer sentence alone)."""
    ordered = sorted(indices, key=lambda index: -len(token_ids[index]))
    batch: list[int] = []
    for index in ordered:
        new_length = split_on_length and batch and len(token_ids[index]) != len(token_ids[batch[0]])
        # batch[0] is the batch's longest source: the sentences sorted longest first
        over_budget = (
            max_tokens is not None and batch and (len(batch) + 1) * len(token_ids[batch[0]]) * beams > max_tokens
        )
        if batch and (len(batch) == batch_size or new_length or over_budget):
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


def default_dtype(device: str | torch.device) -> torch.dtype | None:
    """bfloat16 on a CUDA GPU that has it: generation reads every weight each step, and half the bytes is about
    twice the steps, with float32's range (float16 may overflow a model trained in float32); None (the saved
    precision) elsewhere."""
    if torch.device(device).type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def load_for_translation(
    name_or_path: str | Path,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    trust_remote_code: bool = False,
    quantize: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a model and its tokenizer from a local folder or a Hub repo id, in eval mode, ready for `translate`.

    `device`: None takes "cuda" when available, else "cpu". `dtype`: None takes bfloat16 on a GPU that has it
    (`default_dtype`) and keeps the saved precision elsewhere; else one of float32 / bfloat16 / float16 (name or
    torch dtype). `trust_remote_code=True` runs the code files the folder
    carries; it is not needed while this package is importable (it registers the classes with the Auto classes).
    `quantize="int8"`: the linear layers run in int8 (torch's dynamic quantization; CPU only, float32 otherwise).
    A local folder with a file missing or corrupt, or a repo id that is neither reachable nor in the local cache,
    is an error naming the file or the repo at once (see `vanilla_transformer.common.model_folder`).
    """
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype={dtype!r} is not one of {', '.join(DTYPES)}")
        dtype = DTYPES[dtype]
    if device is None:
        # int8 dynamic quantization runs on the CPU only
        device = "cuda" if torch.cuda.is_available() and quantize is None else "cpu"
    if dtype is None:
        dtype = default_dtype(device)
    # the tokenizer first: its checks are quick, the weights may take a while to load
    tokenizer = load_tokenizer(name_or_path, described_as="model", trust_remote_code=trust_remote_code)
    model_kwargs = {"dtype": dtype} if dtype is not None else {}
    model = load_model_folder(name_or_path, trust_remote_code=trust_remote_code, **model_kwargs)
    model = model.to(device).eval()
    if quantize is not None:
        model = quantize_linear_layers(model, quantize)
    return model, tokenizer


def add_translate_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `translate --model FOLDER_OR_REPO [--input FILE ...] [--output FILE] ...`; the handler is in `func`."""
    parser = subparsers.add_parser(
        "translate",
        help="translate lines of text with a trained model",
        description="Translate one sentence per line from stdin or --input files; the translations are written "
        "in input order, one per line, to stdout or --output. An empty line gives an empty line.",
    )
    parser.add_argument("--model", required=True, help="a trained model folder or a Hugging Face Hub repo id")
    parser.add_argument("--input", nargs="+", type=Path, help="text files, one sentence a line (.gz ok); default stdin")
    parser.add_argument("--output", type=Path, help="file for the translations; default stdout")
    parser.add_argument("--num-beams", type=int, help="beam size; default the model's generation config, else 5")
    parser.add_argument(
        "--max-new-tokens", type=int, help="longest translation in tokens; default the generation config's"
    )
    parser.add_argument("--max-input-tokens", type=int, help="longer inputs are truncated with a warning")
    parser.add_argument(
        "--batch-size", type=int, help=f"sentences per batch (default {BATCH_SIZE} on the CPU, no count on a GPU)"
    )
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        help="tokens per batch, as sentences x longest source x beams "
        f"(default {GPU_BATCH_TOKENS:,} on a GPU, no limit on the CPU)",
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default cuda when available (cpu with --quantize)")
    parser.add_argument(
        "--dtype", choices=tuple(DTYPES), help="default bfloat16 on a GPU that has it, else the saved precision"
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        help="int8 linear layers (PyTorch: dynamic quantization, CPU; CTranslate2: compute type int8)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="pytorch",
        help="pytorch: the model folder with generate(); ctranslate2: a folder from `export ctranslate2`; onnx: a "
        "folder from `export onnx` in ONNX Runtime",
    )
    parser.add_argument(
        "--shortlist",
        action="store_true",
        help="decode with the model's lexical shortlist (`vanilla-transformer shortlist` builds one; with "
        "--engine ctranslate2, the export's vocabulary map)",
    )
    parser.add_argument(
        "--split-sentences",
        metavar="LANGUAGE",
        help="each line is a paragraph: split it into sentences by the rules of LANGUAGE (the source's ISO 639 code, "
        "sentencex), translate them as one batch and join them with the line's own spacing (.[paragraphs])",
    )
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="run the model code stored with the model (Hub repos)"
    )
    parser.set_defaults(func=run_translate)
    return parser


def run_translate(args: argparse.Namespace) -> int:
    check_options(args.num_beams, args.max_new_tokens, args.batch_size, args.max_input_tokens, args.max_batch_tokens)
    check_engine(args.model, args.engine)  # before stdin is read: a wrong folder is said at once
    if args.split_sentences:
        import_sentencex()  # before the model loads: a missing extra is told at once
    if args.input:
        missing = [str(path) for path in args.input if not path.is_file()]
        if missing:
            raise FileNotFoundError(f"input files not found: {', '.join(missing)}")
        texts, names = [], []
        for path in args.input:
            for number, line in enumerate(iter_lines(path), start=1):
                texts.append(line)
                names.append(f"{path}:{number}")
    else:
        texts, names = _read_stdin(), None
    if args.engine == "ctranslate2":
        compute_type = args.quantize or args.dtype or "default"
        model, tokenizer = load_ctranslate2(args.model, args.device, compute_type)
    elif args.engine == "onnx":
        check_onnx_options(args.quantize, args.dtype, args.device, args.shortlist)
        model, tokenizer = load_onnx(args.model)
    else:
        # the shortlist before the weights: a folder without one is told at once
        shortlist = LexicalShortlist.from_pretrained(args.model) if args.shortlist else None
        model, tokenizer = load_for_translation(
            args.model, args.device, args.dtype, args.trust_remote_code, args.quantize
        )
        if shortlist is not None:
            model.lexical_shortlist = shortlist

    def translate_lines(lines: list[str], line_names: list[str] | None = names) -> list[str]:
        return _translate(
            model,
            tokenizer,
            lines,
            num_beams=args.num_beams,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            max_input_tokens=args.max_input_tokens,
            device=None,
            progress=bool(args.input),
            line_names=line_names,
            shortlist=args.shortlist,
            max_batch_tokens=args.max_batch_tokens,
        )

    if args.split_sentences:
        # a sentence's line name would be its paragraph's: truncation warnings then name sentences by number
        translations = translate_paragraphs(texts, args.split_sentences, lambda lines: translate_lines(lines, None))
    else:
        translations = translate_lines(texts)
    # one translation per line, whatever bytes the model produced
    lines = "".join(" ".join(text.splitlines()) + "\n" for text in translations)
    if args.output is None:
        sys.stdout.write(lines)
        sys.stdout.flush()
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(lines, encoding="utf-8", newline="\n")
        print(f"wrote {len(translations)} translations to {args.output}", file=sys.stderr)
    return 0


def _read_stdin() -> list[str]:
    """The lines of stdin split on "\\n" only (a stray "\\r" inside a line must not break the alignment)."""
    buffer = getattr(sys.stdin, "buffer", None)
    data = buffer.read().decode("utf-8") if buffer is not None else sys.stdin.read()
    if not data:
        return []
    return [line.removesuffix("\r") for line in data.removesuffix("\n").split("\n")]


__all__ = ["add_translate_subcommand", "default_dtype", "load_for_translation", "run_translate", "translate"]
