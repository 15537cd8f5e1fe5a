"""The `vanilla-transformer plot` command: `add_plot_subcommand` and its handlers."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..common.model_folder import MissingTokenizerError, load_config, load_model_folder, load_tokenizer
from .attention import STACKS, cross_attention_alignment, self_attention_heatmaps
from .masks import mask_plots
from .positions import (
    ALIBI_HEADS,
    D_MODEL,
    DIMS,
    HEAD_DIM,
    LENGTH,
    MAX_DISTANCE,
    THETA,
    position_plot,
)
from .rendering import token_labels


def add_plot_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `plot {alignment,attention,positions,masks} ... --output FILE`; the handler is in `func`."""
    plot = subparsers.add_parser(
        "plot",
        help="draw attention alignments, attention heads, position encodings or masks (PNG, SVG, PDF, HTML)",
    )
    kinds = plot.add_subparsers(dest="plot_kind", required=True)

    def common(parser: argparse.ArgumentParser, model_required: bool) -> None:
        parser.add_argument("--output", type=Path, required=True, help="file to write: .png, .svg, .pdf or .html")
        parser.add_argument("--model", type=Path, required=model_required, help="a saved model folder")
        parser.add_argument("--tokenizer", type=Path, help="tokenizer folder (default: the model folder)")

    alignment = kinds.add_parser("alignment", help="cross-attention of each generated token over the source")
    common(alignment, model_required=True)
    alignment.add_argument("--text", required=True, help="the source sentence to translate")
    alignment.add_argument("--layer", type=int, help="one decoder layer (default: mean of all)")
    alignment.add_argument("--head", type=int, help="one head (default: mean of all)")
    alignment.add_argument("--num-beams", type=int, default=1, help="beams of the translation drawn (1: greedy)")
    alignment.add_argument(
        "--max-new-tokens",
        type=int,
        help="longest translation in tokens (default: the generation config's, else twice the source length + 10)",
    )
    alignment.set_defaults(func=_run_alignment)

    attention = kinds.add_parser("attention", help="per-head attention maps of one layer")
    common(attention, model_required=True)
    attention.add_argument("--text", required=True, help="the source sentence")
    attention.add_argument("--target", help="target sentence fed to the decoder (default: the greedy translation)")
    attention.add_argument(
        "--stack",
        choices=STACKS,
        default="encoder",
        help="the encoder's self-attention, the decoder's masked self-attention, or the cross-attention",
    )
    attention.add_argument("--layer", type=int, default=-1, help="layer index, negative from the top (default -1)")
    attention.add_argument("--head", type=int, help="one head (default: all heads in a grid)")
    attention.set_defaults(func=_run_attention)

    positions = kinds.add_parser(
        "positions", help="sinusoidal or learned position encodings, rotary decay, or ALiBi's penalties"
    )
    common(positions, model_required=False)
    positions.add_argument(
        "--kind",
        choices=("sinusoidal", "learned", "rope", "alibi"),
        help="default: the model's position_embedding_type, or sinusoidal without --model",
    )
    positions.add_argument("--d-model", type=int, help=f"sinusoidal width (default: the model's, else {D_MODEL})")
    positions.add_argument("--length", type=int, default=LENGTH, help="positions to draw (sinusoidal)")
    positions.add_argument(
        "--dims",
        type=int,
        nargs="+",
        help=f"dimensions drawn as curves (default {' '.join(map(str, DIMS))}, those below d_model)",
    )
    positions.add_argument("--max-positions", type=int, help="rows of a learned table to draw (default: all)")
    positions.add_argument("--head-dim", type=int, help=f"rotary head size (default: the model's, else {HEAD_DIM})")
    positions.add_argument("--theta", type=float, help=f"rotary base (default: the model's rope_theta, else {THETA:g})")
    positions.add_argument(
        "--max-distance", type=int, default=MAX_DISTANCE, help="largest relative distance (rotary, alibi)"
    )
    positions.add_argument("--heads", type=int, help=f"ALiBi heads (default: the model's, else {ALIBI_HEADS})")
    positions.set_defaults(func=_run_positions)

    masks = kinds.add_parser("masks", help="padding, causal and sliding-window masks of a batch")
    common(masks, model_required=False)
    masks.add_argument("--text", action="append", help="a sentence of the batch (repeat); needs a tokenizer")
    masks.add_argument("--lengths", type=int, nargs="+", help="sentence lengths, without a tokenizer (default 8 5)")
    masks.add_argument(
        "--padding-side",
        choices=("right", "left"),
        default="right",
        help="the side the shorter sentences are padded on",
    )
    masks.add_argument("--sliding-window", type=int, help="window width (default: the model's sliding_window)")
    masks.set_defaults(func=_run_masks)
    return plot


def _load_model(folder: Path):
    # a str, so that a Hub repo id given as --model stays one
    return load_model_folder(str(folder), attn_implementation="eager").eval()


def _load_tokenizer(args: argparse.Namespace):
    """The tokenizer of `--tokenizer`, else of `--model`."""
    if args.tokenizer is not None:
        return load_tokenizer(str(args.tokenizer))
    try:
        return load_tokenizer(str(args.model))
    except MissingTokenizerError as error:
        raise MissingTokenizerError(f"{error}, or pass --tokenizer FOLDER") from None


def _load_model_and_tokenizer(args: argparse.Namespace):
    """The `--model` folder's model (eager attention, eval mode) and the tokenizer of `--tokenizer`, else `--model`."""
    tokenizer = _load_tokenizer(args)  # first: its checks are quick, the weights may take a while to load
    return _load_model(args.model), tokenizer


def _wrote(result) -> int:
    """Say where the picture was written; the handler's exit status."""
    print(f"wrote {result.path}")
    return 0


def _run_alignment(args: argparse.Namespace) -> int:
    model, tokenizer = _load_model_and_tokenizer(args)
    result = cross_attention_alignment(
        model,
        tokenizer,
        args.text,
        args.output,
        layer=args.layer,
        head=args.head,
        num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens,
    )
    print(f"translation: {result.translation}")
    return _wrote(result)


def _run_attention(args: argparse.Namespace) -> int:
    model, tokenizer = _load_model_and_tokenizer(args)
    result = self_attention_heatmaps(
        model,
        tokenizer,
        args.text,
        args.output,
        target_text=args.target,
        stack=args.stack,
        layer=args.layer,
        head=args.head,
    )
    return _wrote(result)


def _run_positions(args: argparse.Namespace) -> int:
    model = _load_model(args.model) if args.model else None
    kind = args.kind or (model.config.position_embedding_type if model is not None else "sinusoidal")
    if kind == "learned" and model is None:
        raise ValueError("--kind learned draws the table of a model: pass --model FOLDER")
    options = dict(
        d_model=args.d_model,
        length=args.length,
        dims=args.dims,
        max_positions=args.max_positions,
        head_dim=args.head_dim,
        theta=args.theta,
        heads=args.heads,
        max_distance=args.max_distance,
    )
    return _wrote(position_plot(kind, model, args.output, **options))


def _run_masks(args: argparse.Namespace) -> int:
    sliding_window = args.sliding_window
    tokens = None
    if args.model and sliding_window is None:
        sliding_window = load_config(str(args.model)).sliding_window
    if args.text:
        if not (args.tokenizer or args.model):
            raise ValueError("--text needs a tokenizer: pass --tokenizer FOLDER or --model FOLDER")
        tokenizer = _load_tokenizer(args)
        tokenizer.padding_side = args.padding_side
        encoded = tokenizer(args.text, padding=True, return_tensors="pt")
        attention_mask = encoded["attention_mask"]
        tokens = [token_labels(tokenizer, ids) for ids in encoded["input_ids"]]
    else:
        lengths = args.lengths or [8, 5]
        if min(lengths) < 1:
            raise ValueError(f"--lengths must be positive, got {lengths}")
        longest = max(lengths)
        attention_mask = torch.zeros(len(lengths), longest, dtype=torch.long)
        for row, length in enumerate(lengths):
            if args.padding_side == "right":
                attention_mask[row, :length] = 1
            else:
                attention_mask[row, longest - length :] = 1
    result = mask_plots(args.output, attention_mask, sliding_window=sliding_window, tokens=tokens)
    return _wrote(result)
