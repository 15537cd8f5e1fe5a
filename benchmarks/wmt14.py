"""The paper's WMT14 English -> German recipe, run and reported: newstest2014 BLEU (sacreBLEU, and as the paper's table
was scored: Moses-tokenized with compounds split, beside its 27.3 for the base model and 28.4 for the big one),
training tokens per second, peak GPU memory, model FLOPs utilisation and the share of time spent waiting for data.

    python -m benchmarks.wmt14 --config configs/wmt14_en_de_base.yaml [any train flag]
    accelerate launch --multi_gpu --num_processes 8 -m benchmarks.wmt14 --config configs/wmt14_en_de_base.yaml

Training tokens/s and MFU are the loop's own (results.json): over the steps alone, saves and evaluations left out,
with the model FLOPs of vanilla_transformer/training/flops.py over the GPUs' dense bf16 peak (known for H100, H200,
A100, L4 and L40S; --peak_tflops otherwise).
"""

from __future__ import annotations

import sys
import time

from benchmarks.common import command_line, machine_summary
from vanilla_transformer.training import TrainingRun, parse_arguments

PAPER_BLEU = {512: 27.3, 1024: 28.4}  # Table 2, base and big, EN-DE newstest2014


def main(argv: list[str] | None = None) -> None:
    run = TrainingRun(*parse_arguments(sys.argv[1:] if argv is None else argv))
    results = run.run()
    if not run.accelerator.is_main_process:
        return
    config = run.unwrapped.config
    tokens_per_second = results["train_tokens_per_second"]
    scored = results.get("test") or results.get("validation") or {}
    rows = [
        ("steps", f"{results['train_steps']:,}"),
        ("processes x micro-batches a step x tokens each", f"{results['processes']} x "
         f"{run.args.gradient_accumulation_steps} x {run.args.max_tokens:,}"),
        ("training tokens/s (source + target; the steps alone)", f"{tokens_per_second:,.0f}"),
        ("data wait, share of the run's step time", f"{results.get('data_wait_share', 0.0):.1%}"),
        ("BLEU, sacreBLEU (cased, 13a)", f"{scored.get('bleu', float('nan')):.2f}"),
        ("BLEU, tokenized with compounds split (the paper's scoring)",
         f"{scored.get('bleu_compound_split', float('nan')):.2f} (paper: {PAPER_BLEU.get(config.d_model, '-')})"),
        ("chrF", f"{scored.get('chrf', float('nan')):.2f}"),
        ("training minutes", f"{results['train_seconds'] / 60:.1f}"),
    ]  # fmt: skip
    if "peak_gpu_memory_gib" in results:
        rows.append(("peak GPU memory (GiB, process 0)", f"{results['peak_gpu_memory_gib']:.1f}"))
    if "mfu" in results:
        rows.append((f"MFU (of {results['peak_tflops']:g} TFLOP/s a GPU)", f"{results['mfu']:.1%}"))
    if "compiled_graphs" in results:
        rows.append(("compiled graphs (--torch_compile)", str(results["compiled_graphs"])))
    split = run.data_args.test_split if results.get("test") else run.data_args.validation_split
    print(f"\n{command_line()}\n{machine_summary()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"scored on {run.data_args.dataset} {split}, beam {run.args.num_beams}\n")
    print("| measurement | value |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
