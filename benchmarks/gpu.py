"""Training and generation speed on one GPU, in one prepared script: the real `train` loop beside the bare model and
MarianMTModel trained by transformers' Seq2SeqTrainer, at the paper's base and big sizes, eager and compiled.

On a synthetic corpus of WMT14-length pairs (Multi30k sentences joined two by two, `benchmarks.data_path`'s), prepared
once with a vocabulary of 37,000, every training candidate runs steps of --tokens-per-step tokens (the paper's
25,000; micro-batches of at most --max-tokens) in --precision (bf16: autocast over float32 weights, as
`train --mixed_precision bf16`), after --warmup-steps steps that are not timed (compilation happens there):

  * loop:   `vanilla-transformer train`'s own loop (TrainingRun: token-budget batches, the data loader's workers,
            fused AdamW, the generator and loss in blocks), evaluation and saves off; `--torch_compile` for compiled;
  * bare:   our model in a plain loop over the same micro-batches (forward, backward, fused AdamW), compiled with
            the loop's own CompiledForward;
  * marian: MarianMTModel of the same size trained by Seq2SeqTrainer (its default fused AdamW, bf16, batches of
            sentences sized to the same tokens a step), `torch_compile=True` for compiled.

Each reports training tokens/s (source + target, real tokens), MFU (model FLOPs of `vanilla_transformer/training/
flops.py` over the GPU's dense bf16 peak) and peak GPU memory (torch.cuda.max_memory_allocated over the run:
weights, gradients, optimizer state and activations). Generation: our model in bf16 translating --gen-sentences
corpus sources, exactly --new-tokens each, greedy and beam 4, with the dynamic cache (eager) and with a static
cache, whose decoding step transformers compiles on a GPU. The goals of issue 52 are printed beside the figures.

    python -m benchmarks.gpu                                   # one CUDA GPU; sized for 8 minutes on an H100
    python -m benchmarks.gpu --json gpu.json --parts loop,bare # a part at a time
    python -m benchmarks.gpu --device cpu --sizes tiny --pairs 2000 --steps 2 --warmup-steps 1 \\
        --tokens-per-step 2000 --max-tokens 1000 --gen-sentences 8 --new-tokens 4 --modes eager  # the smoke test

A time budget (--budget-seconds, 480) skips what would not fit, saying so; progress goes to stderr with the time.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .common import command_line, log, machine_summary
from .data_path import MULTI30K, write_corpus

SIZES = {
    # the paper's Table 3 rows; tiny is the CPU smoke test's
    "base": dict(d_model=512, layers=6, heads=8, ffn=2048, dropout=0.1),
    "big": dict(d_model=1024, layers=6, heads=16, ffn=4096, dropout=0.3),
    "tiny": dict(d_model=32, layers=1, heads=2, ffn=64, dropout=0.1),
}
PARTS = ("loop", "bare", "marian", "generate")
# roughly what each part costs on an H100 (seconds a size, eager and compiled), to skip what the budget cannot hold
PART_SECONDS = {"loop": 90, "bare": 50, "marian": 40, "generate": 60}
GOALS = {
    "loop / bare (compiled)": ">= 0.9",
    "MFU, loop compiled": "base >= 30%, big >= 40%",
    "loop compiled / Seq2SeqTrainer Marian": ">= 2",
    "peak memory, loop / Marian": "<= 1",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--sizes", default="base,big", help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--precision", choices=("bf16", "no"), default=None, help="default bf16 on cuda, no on cpu")
    parser.add_argument("--pairs", type=int, default=100_000, help="training pairs of the synthetic corpus")
    parser.add_argument("--vocab-size", type=int, default=37_000)
    parser.add_argument("--tokens-per-step", type=int, default=25_000)
    parser.add_argument("--max-tokens", type=int, default=12_500, help="tokens of a micro-batch at most")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps of each candidate")
    parser.add_argument("--warmup-steps", type=int, default=6, help="untimed steps first (compilation included)")
    parser.add_argument("--gen-sentences", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens generated per sentence, exactly")
    parser.add_argument("--gen-batch-tokens", type=int, default=16_384, help="source tokens x beams a batch")
    parser.add_argument("--modes", default="eager,compiled", help="comma-separated, of eager, compiled")
    parser.add_argument("--compile-backend", default="inductor", help="aot_eager checks the tracing alone (tests)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the GPU's dense bf16 peak (default: known)")
    parser.add_argument("--budget-seconds", type=float, default=480.0)
    parser.add_argument("--work", type=Path, default=None, help="folder for the corpus and runs (default: temporary)")
    parser.add_argument("--multi30k", type=Path, default=MULTI30K)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    return parser


# ------------------------------------------------------------------------------------------------ bookkeeping


@dataclass
class Clock:
    """Time since the start and the budget left, for progress lines and for skipping what would not fit."""

    budget: float
    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def fits(self, seconds: float) -> bool:
        return self.elapsed() + seconds <= self.budget

    def say(self, message: str) -> None:
        log(f"[{self.elapsed():6.1f} s] {message}")


@dataclass
class Training:
    """What one training candidate measured."""

    tokens_per_second: float
    mfu: float | None
    peak_memory_gib: float | None
    compiled_graphs: int | None = None
    first_steps_seconds: float | None = None


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_device(device: str) -> None:
    """Between candidates: compiled code, memory and the peak of the last one gone."""
    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gib(device: str) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None


@contextlib.contextmanager
def compile_backend(name: str):
    """The loop's CompiledForward with another torch.compile backend (aot_eager in the smoke test)."""
    from vanilla_transformer.training import compiled_step

    original = compiled_step.CountingInductor.__init__

    def init(self):
        self.inductor = torch._dynamo.lookup_backend(name)
        self.graphs = 0

    compiled_step.CountingInductor.__init__ = init
    try:
        yield
    finally:
        compiled_step.CountingInductor.__init__ = original


# ---------------------------------------------------------------------------------------------------- corpus


def prepare(args, clock: Clock):
    """The synthetic corpus written and prepared (tokenizer, tokenized Arrow files) once; its `val` split is 8 pairs,
    which each loop run scores at its end."""
    from vanilla_transformer.training import DataArguments, prepare_corpus

    folder = args.work / f"corpus-{args.pairs}"
    clock.say(f"writing {args.pairs:,} pairs of WMT14 length to {folder}")
    write_corpus(folder, args.pairs, args.multi30k, seed=args.seed)
    for lang in ("en", "de"):
        lines = (folder / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:8]
        (folder / f"bench.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    data_args = DataArguments(
        dataset=str(folder),
        validation_split="bench",
        test_split=None,
        vocab_size=args.vocab_size,
        max_source_length=256,
        max_target_length=256,
        max_eval_samples=8,
        tokenizer_sample_sentences=min(2 * args.pairs, 1_000_000),
        cache_dir=str(args.work / "cache"),
    )
    clock.say("preparing the corpus (tokenizer, tokenization)")
    corpus = prepare_corpus(data_args)
    clock.say(f"corpus ready: {len(corpus.train):,} pairs, {len(corpus.tokenizer):,} tokens")
    return data_args, corpus


def stack_shape(size: str) -> dict:
    """A size's shape as the config fields our model and MarianConfig both name so."""
    shape = SIZES[size]
    return dict(
        d_model=shape["d_model"],
        encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"],
        dropout=shape["dropout"],
    )


def model_arguments(size: str):
    from vanilla_transformer.training import ModelArguments

    return ModelArguments(**stack_shape(size), label_smoothing=0.1)


def peak_tflops(args) -> float | None:
    from vanilla_transformer.training.flops import peak_tflops as known_peak

    return known_peak(args.device, args.peak_tflops)


def mfu(flops: float, seconds: float, peak: float | None) -> float | None:
    return None if not peak else flops / seconds / (peak * 1e12)


# ------------------------------------------------------------------------------------------- the train loop


def loop_run(args, size: str, compiled: bool, data_args, corpus, clock: Clock) -> Training:
    """`train`'s own loop: its log windows after the warm-up steps give the rate (saves and evaluation are off)."""
    from vanilla_transformer.training import TrainArguments, TrainingRun

    window = max(1, args.warmup_steps)  # windows end at the warm-up's last step, then every as many steps
    train_args = TrainArguments(
        output_dir=str(args.work / f"loop-{size}-{'compiled' if compiled else 'eager'}"),
        overwrite_output_dir=True,
        max_steps=args.warmup_steps + args.steps,
        tokens_per_step=args.tokens_per_step,
        max_tokens=args.max_tokens,
        warmup_steps=4000,
        logging_steps=window,
        eval_steps=0,
        save_steps=0,
        num_beams=1,
        max_new_tokens=8,
        mixed_precision=args.precision,
        use_cpu=args.device == "cpu",
        dataloader_num_workers=2,
        report_to="none",
        disable_progress_bar=True,
        torch_compile=compiled,
        peak_tflops=args.peak_tflops,
        seed=args.seed,
    )
    reset_device(args.device)
    run = TrainingRun(model_arguments(size), data_args, train_args, corpus=corpus)
    windows = []
    log_window = run.log_window

    def record(progress, speed_window):
        log_window(progress, speed_window)  # reads the loss: the device has finished the window's steps
        windows.append((run.state.step, speed_window.tokens, speed_window.flops, speed_window.seconds()))

    run.log_window = record
    started = time.perf_counter()
    with compile_backend(args.compile_backend):
        results = run.run()
    timed = [entry for entry in windows if entry[0] > args.warmup_steps]
    tokens, flops, seconds = (sum(entry[i] for entry in timed) for i in (1, 2, 3))
    if not timed:  # fewer steps than a window: the whole run
        tokens, seconds = results["train_tokens"], results["train_seconds"]
    measured = Training(
        tokens_per_second=tokens / seconds,
        mfu=mfu(flops, seconds, run.peak_tflops) if timed else results.get("mfu"),
        peak_memory_gib=results.get("peak_gpu_memory_gib"),
        compiled_graphs=results.get("compiled_graphs"),
        first_steps_seconds=round(sum(entry[3] for entry in windows if entry[0] <= args.warmup_steps), 1),
    )
    clock.say(f"loop {size} {'compiled' if compiled else 'eager'}: {measured.tokens_per_second:,.0f} tokens/s "
              f"(run {time.perf_counter() - started:.0f} s)")  # fmt: skip
    return measured


# --------------------------------------------------------------------------------------------- the bare model


def micro_batches(args, corpus, count: int) -> tuple[list[dict], list[int]]:
    """The first `count` micro-batches of the loop's own plan, collated on the CPU, and each step's target tokens."""
    from vanilla_transformer.training.batches import BatchPlan, length_array, seq2seq_collator

    lengths = length_array(corpus.train)
    plan = BatchPlan(lengths, args.max_tokens, args.seed)
    batches, _, _ = plan.take(0, 0, count)
    collator = seq2seq_collator(corpus.tokenizer)
    collated = []
    for indices in batches:
        rows = corpus.train[indices.tolist()]
        pairs = zip(rows["input_ids"], rows["labels"], strict=True)
        collated.append(collator([{"input_ids": source, "labels": target} for source, target in pairs]))
    return collated, [int(lengths[indices, 1].sum()) for indices in batches]


def bare_run(args, size: str, compiled: bool, corpus, clock: Clock) -> Training:
    """Our model outside the loop: the same micro-batches, forward, backward and fused AdamW, nothing else."""
    from vanilla_transformer import VanillaTransformerForConditionalGeneration
    from vanilla_transformer.training.compiled_step import CompiledForward
    from vanilla_transformer.training.flops import training_flops

    reset_device(args.device)
    accumulation = -(-args.tokens_per_step // args.max_tokens)
    steps = args.warmup_steps + args.steps
    batches, targets = micro_batches(args, corpus, steps * accumulation)
    torch.manual_seed(args.seed)
    config = model_arguments(size).build_config(corpus.tokenizer)
    model = VanillaTransformerForConditionalGeneration._from_config(config).to(args.device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    with compile_backend(args.compile_backend):
        forward = CompiledForward(model) if compiled else model
    autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    device_batches = [{k: v.to(args.device, non_blocking=True) for k, v in b.items()} for b in batches]
    tokens = flops = 0.0
    for step in range(steps):
        if step == args.warmup_steps:
            synchronize(args.device)
            started = time.perf_counter()
        group = range(step * accumulation, (step + 1) * accumulation)
        step_targets = sum(targets[i] for i in group)
        for i in group:
            with autocast:
                loss = forward(**device_batches[i], num_items_in_batch=1).loss / step_targets
            loss.backward()
            if step >= args.warmup_steps:
                source = batches[i]["attention_mask"].sum(1)
                target = (batches[i]["labels"] != -100).sum(1)
                tokens += int(source.sum() + target.sum())
                flops += training_flops(config, source.numpy(), target.numpy())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(args.device)
    seconds = time.perf_counter() - started
    measured = Training(tokens / seconds, mfu(flops, seconds, peak_tflops(args)), peak_memory_gib(args.device))
    if compiled:
        measured.compiled_graphs = forward.graphs
    clock.say(f"bare {size} {'compiled' if compiled else 'eager'}: {measured.tokens_per_second:,.0f} tokens/s")
    del model, optimizer, forward, device_batches
    return measured


# ------------------------------------------------------------------------------------------------ MarianMTModel


def marian_run(args, size: str, compiled: bool, corpus, clock: Clock) -> Training:
    """MarianMTModel of the same size trained by Seq2SeqTrainer: batches of sentences, as many as make the loop's
    tokens a step on average; tokens counted from each micro-batch's masks, on the device."""
    from transformers import MarianConfig, MarianMTModel, Seq2SeqTrainer, Seq2SeqTrainingArguments

    from vanilla_transformer.training.batches import length_array, seq2seq_collator
    from vanilla_transformer.training.flops import training_flops

    reset_device(args.device)
    tokenizer = corpus.tokenizer
    lengths = length_array(corpus.train)
    accumulation = -(-args.tokens_per_step // args.max_tokens)
    # the loop's micro-batch holds max_tokens padded tokens of its longer side; sentences of mean length fill it so
    sentences = max(1, int(args.max_tokens / lengths.max(axis=1).mean()))
    steps = args.warmup_steps + args.steps
    train = corpus.train.select(range(min(len(corpus.train), steps * accumulation * sentences)))
    config = MarianConfig(
        vocab_size=len(tokenizer),
        **stack_shape(size),
        activation_function="relu",
        max_position_embeddings=512,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        forced_eos_token_id=None,
    )
    torch.manual_seed(args.seed)
    model = MarianMTModel(config)
    our_config = model_arguments(size).build_config(tokenizer)
    # the masks' row sums stay on the device until the end: reading them each micro-batch would wait for it
    counted = {"lengths": [], "started": None}

    class CountingTrainer(Seq2SeqTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if self.state.global_step >= args.warmup_steps:
                if counted["started"] is None:
                    synchronize(args.device)
                    counted["started"] = time.perf_counter()
                counted["lengths"].append((inputs["attention_mask"].sum(1), (inputs["labels"] != -100).sum(1)))
            return super().training_step(model, inputs, num_items_in_batch)

    training_args = Seq2SeqTrainingArguments(
        output_dir=str(args.work / f"marian-{size}"),
        per_device_train_batch_size=sentences,
        gradient_accumulation_steps=accumulation,
        max_steps=steps,
        learning_rate=1e-4,
        adam_beta2=0.98,
        bf16=args.precision == "bf16",
        use_cpu=args.device == "cpu",
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=2,
        torch_compile=compiled,
        torch_compile_backend=args.compile_backend if compiled else None,
        disable_tqdm=True,
        seed=args.seed,
    )
    trainer = CountingTrainer(
        model=model,
        args=training_args,
        train_dataset=train,
        data_collator=seq2seq_collator(tokenizer, model=model),
        processing_class=tokenizer,
    )
    trainer.train()
    synchronize(args.device)
    seconds = time.perf_counter() - counted["started"]
    source = torch.cat([pair[0] for pair in counted["lengths"]]).cpu().numpy()
    target = torch.cat([pair[1] for pair in counted["lengths"]]).cpu().numpy()
    flops = training_flops(our_config, source, target)
    rate = (source.sum() + target.sum()) / seconds
    measured = Training(float(rate), mfu(flops, seconds, peak_tflops(args)), peak_memory_gib(args.device))
    mode = "compiled" if compiled else "eager"
    clock.say(f"Marian (Seq2SeqTrainer) {size} {mode}: {measured.tokens_per_second:,.0f} tokens/s")
    del trainer, model
    return measured


# ------------------------------------------------------------------------------------------------- generation


def generation_runs(args, size: str, corpus, clock: Clock) -> dict[str, float]:
    """New tokens/s of our model in bf16 (float32 on the CPU), greedy and beam 4, dynamic cache and static cache."""
    from transformers import GenerationConfig

    from vanilla_transformer import VanillaTransformerForConditionalGeneration

    reset_device(args.device)
    tokenizer = corpus.tokenizer
    torch.manual_seed(args.seed)
    config = model_arguments(size).build_config(tokenizer)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    model = VanillaTransformerForConditionalGeneration._from_config(config).to(args.device, dtype).eval()
    sources = [ids for ids in corpus.train[: 4 * args.gen_sentences]["input_ids"] if len(ids) <= 64]
    sources = sorted(sources[: args.gen_sentences], key=len, reverse=True)
    if not sources:
        raise SystemExit("no corpus source of 64 tokens or fewer to generate from: a larger --vocab-size")
    results = {}
    for beams in (1, 4):
        for cache in ("dynamic", "static"):
            generation = GenerationConfig(
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                num_beams=beams,
                do_sample=False,
                pad_token_id=config.pad_token_id,
                eos_token_id=config.eos_token_id,
                decoder_start_token_id=config.decoder_start_token_id,
                **({"cache_implementation": "static"} if cache == "static" else {}),
            )
            batches, batch = [], []
            for ids in sources:  # longest first: a batch of at most gen_batch_tokens source tokens x beams
                if batch and (len(batch) + 1) * len(batch[0]) * beams > args.gen_batch_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(ids)
            batches.append(batch)
            padded = [tokenizer.pad({"input_ids": b}, return_tensors="pt").to(args.device) for b in batches]

            def generate_all(padded=padded, generation=generation):
                with torch.inference_mode():
                    for inputs in padded:
                        model.generate(**inputs, generation_config=generation)

            generate_all()  # warm-up: compilation of the static cache's step on a GPU
            synchronize(args.device)
            started = time.perf_counter()
            generate_all()
            synchronize(args.device)
            rate = len(sources) * args.new_tokens / (time.perf_counter() - started)
            name = f"{'greedy' if beams == 1 else 'beam 4'}, {cache} cache"
            results[name] = rate
            clock.say(f"generate {size} {name}: {rate:,.0f} new tokens/s")
    return results


# ------------------------------------------------------------------------------------------------------ report


def ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}" if numerator and denominator else ""


def report(args, measured: dict) -> list[tuple[str, list[str]]]:
    """Rows of (measurement, a value a size)."""
    sizes = [size for size in args.sizes if size in measured]

    def cell(size, key, attribute="tokens_per_second", form="{:,.0f}"):
        value = getattr(measured[size].get(key), attribute, None) if measured[size].get(key) else None
        return form.format(value) if value is not None else ""

    rows = []
    for key, label in (
        ("loop eager", "train loop, eager"),
        ("loop compiled", "train loop, --torch_compile"),
        ("bare eager", "bare model, eager"),
        ("bare compiled", "bare model, compiled"),
        ("marian eager", "MarianMTModel + Seq2SeqTrainer"),
        ("marian compiled", "MarianMTModel + Seq2SeqTrainer, torch_compile"),
    ):
        if any(measured[size].get(key) for size in sizes):
            rows.append((f"{label}: training tokens/s", [cell(size, key) for size in sizes]))
            rows.append((f"{label}: MFU (%)", [cell(size, key, "mfu", "{:.1%}") for size in sizes]))
            rows.append(
                (f"{label}: peak GPU memory (GiB)", [cell(size, key, "peak_memory_gib", "{:.2f}") for size in sizes])
            )
    for key in ("loop compiled", "bare compiled"):
        if any(measured[size].get(key) for size in sizes):
            rows.append(
                (f"{key.split()[0]}, compiled: graphs", [cell(size, key, "compiled_graphs", "{}") for size in sizes])
            )

    def rate(size, key):
        found = measured[size].get(key)
        return found.tokens_per_second if found else None

    def memory(size, key):
        found = measured[size].get(key)
        return found.peak_memory_gib if found else None

    ratios = (
        ("loop / bare, compiled (goal >= 0.9)", rate, "loop compiled", "bare compiled"),
        ("loop / bare, eager", rate, "loop eager", "bare eager"),
        ("loop compiled / Marian (goal >= 2)", rate, "loop compiled", "marian eager"),
        ("peak memory, loop compiled / Marian (goal <= 1)", memory, "loop compiled", "marian eager"),
    )
    for label, read, numerator, denominator in ratios:
        rows.append((label, [ratio(read(s, numerator), read(s, denominator)) for s in sizes]))
    generated = sorted({name for size in sizes for name in measured[size].get("generate", {})})
    for name in generated:
        rows.append((f"generate, {name}: new tokens/s",
                     [f"{measured[s]['generate'][name]:,.0f}" if name in measured[s].get("generate", {}) else ""
                      for s in sizes]))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    args.modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = sorted(set(args.sizes) - set(SIZES)) + sorted(set(args.parts) - set(PARTS))
    unknown += sorted(set(args.modes) - {"eager", "compiled"})
    if unknown:
        sys.exit(f"unknown sizes, parts or modes: {', '.join(unknown)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(
            f"--device cuda, and torch.cuda.is_available() is False here (torch {torch.__version__}); run it on a GPU "
            "machine, or pass --device cpu --sizes tiny for the smoke test's size"
        )
    args.precision = args.precision or ("bf16" if args.device == "cuda" else "no")
    args.work = args.work or Path(tempfile.mkdtemp(prefix="gpu-benchmark-"))
    clock = Clock(args.budget_seconds)
    clock.say(f"{machine_summary()}; sizes {', '.join(args.sizes)}; parts {', '.join(args.parts)}")
    data_args, corpus = prepare(args, clock)
    measured = {size: {} for size in args.sizes}
    skipped = []
    plan = [(size, part) for part in ("loop", "bare", "marian") for size in args.sizes if part in args.parts]
    plan += [(size, "generate") for size in args.sizes if "generate" in args.parts]
    for size, part in plan:
        scale = 3 if size == "big" else 1
        if not clock.fits(PART_SECONDS[part] * scale if args.device == "cuda" else 0):
            skipped.append(f"{part} {size}")
            clock.say(f"skipped {part} {size}: the budget of {args.budget_seconds:.0f} s would not hold it")
            continue
        if part == "generate":
            measured[size]["generate"] = generation_runs(args, size, corpus, clock)
            continue
        for compiled in [mode == "compiled" for mode in args.modes]:
            if part == "marian" and compiled:
                continue  # Seq2SeqTrainer as users run it; its compiled run is left out to keep the 8 minutes
            key = f"{part} {'compiled' if compiled else 'eager'}"
            if part == "loop":
                measured[size][key] = loop_run(args, size, compiled, data_args, corpus, clock)
            elif part == "bare":
                measured[size][key] = bare_run(args, size, compiled, corpus, clock)
            else:
                measured[size][key] = marian_run(args, size, compiled, corpus, clock)
    rows = report(args, measured)
    device = torch.cuda.get_device_name() if args.device == "cuda" else machine_summary()
    print(f"\n### Training and generation on {device}, {args.precision}\n")
    print(f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine_summary()}")
    print(f"- Command: `{command_line()}`")
    print(f"- Corpus: {len(corpus.train):,} synthetic WMT-length pairs, vocabulary {len(corpus.tokenizer):,}; "
          f"{args.tokens_per_step:,} tokens a step in micro-batches of at most {args.max_tokens:,}; "
          f"{args.steps} timed steps after {args.warmup_steps}; generation: {args.gen_sentences} sentences, "
          f"{args.new_tokens} new tokens each")  # fmt: skip
    print(f"- Goals: {'; '.join(f'{name} {goal}' for name, goal in GOALS.items())}")
    if skipped:
        print(f"- Skipped for the time budget: {', '.join(skipped)}")
    print(f"- Total time: {clock.elapsed():.0f} s\n")
    print("| measurement | " + " | ".join(args.sizes) + " |")
    print("|---|" + "---:|" * len(args.sizes))
    for label, cells in rows:
        print(f"| {label} | " + " | ".join(cells) + " |")
    if args.json:
        payload = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": command_line(),
            "machine": machine_summary(),
            "device": device,
            "arguments": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "measured": {
                size: {key: (value if isinstance(value, dict) else vars(value)) for key, value in parts.items()}
                for size, parts in measured.items()
            },
            "rows": rows,
            "skipped": skipped,
            "seconds": round(clock.elapsed(), 1),
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
