"""Base-size Transformer on one CUDA GPU in bfloat16: vanilla_transformer against MarianMTModel.

Same method as speed.py (alternating pairs, medians, per-pair ratios), at the size of the paper's base
model (d_model 512, 6+6 layers, 8 heads, FFN 2048, vocabulary 32000), plus the model FLOPs utilisation
(MFU) of training:

    training FLOPs per step = 3 x forward FLOPs (backward ~ 2 x forward), forward FLOPs per sentence =
        2 x S x L x (4 d^2 + 2 d f)                             encoder matmuls (the "2 x params x tokens")
      + 2 x T x L x (6 d^2 + 2 d f) + 2 x S x L x 2 d^2         decoder: self q,k,v,o + cross q,o; cross k,v
      + 2 x T x d x V                                           generator (tied embedding matrix)
      + 4 x L x d x (S^2 + T^2 + T x S)                         attention scores and weighted values
    (S, T: source and target lengths, L layers per stack, d = d_model, f = FFN width, V = vocabulary;
    embedding lookups, norms, softmax and the optimiser are not counted, as usual for MFU.)

    python -m benchmarks.gpu                      # needs a CUDA device
    python -m benchmarks.gpu --peak-tflops 989 --json gpu.json
"""

from __future__ import annotations

import argparse
import sys

import torch

from . import speed
from .common import Report, Row, publish

H200_BF16_DENSE_TFLOPS = 989.0


def build_parser() -> argparse.ArgumentParser:
    parser = speed.build_parser(description=__doc__.splitlines()[0])
    parser.set_defaults(
        vocab=32000,
        d_model=512,
        layers=6,
        heads=8,
        ffn=2048,
        batch=256,
        src_len=32,
        tgt_len=32,
        train_steps=10,
        warmup=3,
        device="cuda",
        dtype="bfloat16",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=H200_BF16_DENSE_TFLOPS,
        help="the GPU's dense peak in TFLOP/s for --dtype (H200 SXM bf16: ~989) to compute MFU against",
    )
    return parser


def forward_flops_per_sentence(args: argparse.Namespace) -> float:
    d, f, layers, vocab = args.d_model, args.ffn, args.layers, args.vocab
    source, target = args.src_len, args.tgt_len
    encoder = 2 * source * layers * (4 * d * d + 2 * d * f)
    decoder = 2 * target * layers * (6 * d * d + 2 * d * f) + 2 * source * layers * 2 * d * d
    generator = 2 * target * d * vocab
    attention = 4 * layers * d * (source**2 + target**2 + target * source)
    return encoder + decoder + generator + attention


def training_flops_per_token(args: argparse.Namespace) -> float:
    """Model FLOPs of one training step divided by the tokens it counts (source + target)."""
    return 3 * forward_flops_per_sentence(args) / (args.src_len + args.tgt_len)


def mfu_row(report: Report) -> Row:
    """Training MFU in percent, per pair, from the training tokens/s row."""
    args = report.args
    training = next(row for row in report.rows if row.label == "Training")
    per_token = training_flops_per_token(args)
    samples = {
        name: [100 * tokens_per_second * per_token / (args.peak_tflops * 1e12) for tokens_per_second in values]
        for name, values in training.samples.items()
    }
    return Row("Training MFU", "%", True, samples)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.device != "cuda":
        parser.error("gpu.py measures a CUDA device; use python -m benchmarks.speed for the CPU")
    if not torch.cuda.is_available():
        sys.exit(
            f"gpu.py needs a CUDA device, and torch.cuda.is_available() is False here (torch {torch.__version__}, "
            f"built for CUDA {torch.version.cuda or 'none'}). Run it on a GPU machine, or use "
            "python -m benchmarks.speed."
        )
    if args.dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        sys.exit(f"{torch.cuda.get_device_name()} does not support bfloat16; pass --dtype float32.")
    report = speed.run_benchmark(args)
    report.rows.insert(1, mfu_row(report))
    report.notes.append(
        f"MFU = training tokens/s x {training_flops_per_token(args) / 1e6:,.1f} MFLOP per token "
        f"(3 x forward matmuls + attention, see gpu.py) / {args.peak_tflops:g} TFLOP/s peak. Weights, gradients "
        f"and AdamW state are in {args.dtype} (no fp32 master copy) for both models."
    )
    publish(report)


if __name__ == "__main__":
    main()
