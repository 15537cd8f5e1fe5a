"""Where a training step's time goes, eager and compiled: torch.profiler's self time by kind of operator.

Our model at `benchmarks.speed`'s size (its size and workload flags), trained as `benchmarks.speed` trains it
(forward, backward, fused AdamW); compiled as `train --torch_compile` compiles it. After --warmup steps (the
compilation among them), --steps steps are timed, then --steps more are profiled:

    python -m benchmarks.training_profile                       # the default size (docs/experiments/training_speed.md)
    python -m benchmarks.training_profile --recipe              # the Multi30k recipe's model and micro-batch

The table gives milliseconds a step of matrix products (`mm`, `addmm`: oneDNN/MKL calls, eager or compiled),
attention's kernels, the compiled graphs' own kernels and everything else, and the share of the matrix products and
attention in the operator time.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.training.compiled_step import CompiledForward

from . import speed
from .common import command_line, machine_summary

MATRIX_PRODUCTS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm")
ATTENTION = (
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_flash_attention",
)
# configs/multi30k_en_de.yaml's model; its micro-batches hold ~4,096 tokens of ~13-token captions
RECIPE = dict(vocab_size=8000, d_model=128, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, position_embedding_type="rope",
              label_smoothing=0.1, dropout=0.2, weight_init="normal")  # fmt: skip


def parse_arguments(argv: list[str]):
    parser = speed.build_parser()
    parser.description = __doc__.splitlines()[0]
    parser.add_argument("--recipe", action="store_true", help="the Multi30k recipe's model, 150 x (14 + 14) tokens")
    parser.add_argument("--steps", type=int, default=3, help="steps timed, and as many profiled")
    args = parser.parse_args(argv)
    if args.recipe:
        args.batch, args.src_len, args.tgt_len = 150, 14, 14
    return args


def build(args) -> torch.nn.Module:
    torch.manual_seed(args.seed)
    if args.recipe:
        return VanillaTransformerForConditionalGeneration(VanillaTransformerConfig(**RECIPE)).train()
    return speed.build_model("ours", args).train()


def measure(model, forward, batch, args) -> dict[str, float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step():
        forward(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    for _ in range(max(args.warmup, 1)):
        step()
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    wall = (time.perf_counter() - started) / args.steps
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        for _ in range(args.steps):
            step()
    kinds = {"matrix products": 0.0, "attention": 0.0, "compiled graphs' kernels": 0.0, "everything else": 0.0}
    for row in profiled.key_averages():
        if row.key in MATRIX_PRODUCTS:
            kind = "matrix products"
        elif row.key in ATTENTION:
            kind = "attention"
        elif "CompiledFxGraph" in row.key:
            kind = "compiled graphs' kernels"
        else:
            kind = "everything else"
        kinds[kind] += row.self_cpu_time_total / 1000 / args.steps
    total = sum(kinds.values())
    return {"step (wall)": wall * 1000, **kinds, "share": (kinds["matrix products"] + kinds["attention"]) / total,
            "warm-up": first}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build(args)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(args.seed)
    source = torch.randint(4, vocab, (args.batch, args.src_len), generator=generator)
    labels = torch.randint(4, vocab, (args.batch, args.tgt_len), generator=generator)
    batch = {"input_ids": source, "attention_mask": torch.ones_like(source), "labels": labels}
    compiled = CompiledForward(model)
    if args.compile_backend != "inductor":
        compiled.backend.inductor = torch._dynamo.lookup_backend(args.compile_backend)
    results = {"eager": measure(model, model, batch, args), "compiled": measure(model, compiled, batch, args)}
    size = "the Multi30k recipe's model" if args.recipe else "benchmarks.speed's size"
    print(f"\n- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine_summary()}")
    print(f"- Command: `{command_line()}`")
    print(f"- {size}, {args.batch} x ({args.src_len} + {args.tgt_len}) tokens a step; ms a step, self CPU time by "
          f"operator over {args.steps} profiled steps; compiled: {compiled.graphs} graph(s) "
          f"({args.compile_backend})\n")  # fmt: skip
    print("| ms a step | eager | compiled |")
    print("|---|---:|---:|")
    for key in ("step (wall)", "matrix products", "attention", "compiled graphs' kernels", "everything else"):
        print(f"| {key} | {results['eager'][key]:,.1f} | {results['compiled'][key]:,.1f} |")
    print(f"| matrix products and attention, share of operator time | {results['eager']['share']:.0%} | "
          f"{results['compiled']['share']:.0%} |")  # fmt: skip
    print(f"| warm-up ({max(args.warmup, 1)} steps, compilation included), s | {results['eager']['warm-up']:.1f} | "
          f"{results['compiled']['warm-up']:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
