"""The paper's WMT14 English -> German recipe, run and reported: newstest2014 BLEU (sacreBLEU, and as the paper's table
was scored: Moses-tokenized with compounds split, beside its 27.3 for the base model and 28.4 for the big one),
training tokens per second, peak GPU memory, model FLOPs utilisation and the share of time spent waiting for data.

    python -m benchmarks.wmt14 --config configs/wmt14_en_de_base.yaml [any train flag]
    accelerate launch --multi_gpu --num_processes 8 -m benchmarks.wmt14 --config configs/wmt14_en_de_base.yaml

MFU = training tokens/s x model FLOPs per token / the GPUs' dense peak (--peak-tflops a GPU, bf16; H200/H100
SXM ~989), with the FLOPs of benchmarks/gpu.py at the corpus's mean source and target lengths.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from benchmarks.common import command_line, machine_summary
from benchmarks.gpu import H200_BF16_DENSE_TFLOPS, training_flops_per_token
from vanilla_transformer.training import TrainingRun, parse_arguments
from vanilla_transformer.training.batches import length_array

PAPER_BLEU = {512: 27.3, 1024: 28.4}  # Table 2, base and big, EN-DE newstest2014


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], add_help=False)
    parser.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS, help="one GPU's dense peak")
    own, train_argv = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    run = TrainingRun(*parse_arguments(train_argv))
    results = run.run()
    if not run.accelerator.is_main_process:
        return
    config, lengths = run.unwrapped.config, length_array(run.corpus.train)
    mean_source, mean_target = (float(value) for value in np.mean(lengths, axis=0))
    sizes = argparse.Namespace(
        d_model=config.d_model,
        ffn=config.encoder_ffn_dim,
        layers=config.encoder_layers,
        vocab=config.vocab_size,
        src_len=mean_source,
        tgt_len=mean_target,
    )
    tokens_per_second = results["train_tokens"] / max(results["train_seconds"], 1e-9)
    scored = results.get("test") or results.get("validation") or {}
    rows = [
        ("steps", f"{results['train_steps']:,}"),
        ("processes x micro-batches a step x tokens each", f"{results['processes']} x "
         f"{run.args.gradient_accumulation_steps} x {run.args.max_tokens:,}"),
        ("training tokens/s (source + target)", f"{tokens_per_second:,.0f}"),
        ("data wait, share of the run's step time", f"{results.get('data_wait_share', 0.0):.1%}"),
        ("BLEU, sacreBLEU (cased, 13a)", f"{scored.get('bleu', float('nan')):.2f}"),
        ("BLEU, tokenized with compounds split (the paper's scoring)",
         f"{scored.get('bleu_compound_split', float('nan')):.2f} (paper: {PAPER_BLEU.get(config.d_model, '-')})"),
        ("chrF", f"{scored.get('chrf', float('nan')):.2f}"),
        ("training minutes", f"{results['train_seconds'] / 60:.1f}"),
    ]  # fmt: skip
    if torch.cuda.is_available():
        peak = own.peak_tflops * 1e12 * results["processes"]
        mfu = tokens_per_second * training_flops_per_token(sizes) / peak
        rows += [("peak GPU memory (GiB, process 0)", f"{results.get('peak_gpu_memory_gib', 0):.1f}"),
                 ("MFU", f"{mfu:.1%}")]  # fmt: skip
    split = run.data_args.test_split if results.get("test") else run.data_args.validation_split
    print(f"\n{command_line()}\n{machine_summary()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"scored on {run.data_args.dataset} {split}, beam {run.args.num_beams}\n")
    print("| measurement | value |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
