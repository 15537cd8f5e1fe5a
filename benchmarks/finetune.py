"""Fine-tuning a trained model on a new domain, and what it forgets: offline, on the CPU, with the demo as the model.

The demo translates numbers below a million (English words -> German words). The new domain is numbers from a million
to a billion ("twenty-one million three hundred thousand" -> "einundzwanzig Millionen dreihunderttausend"), whose
million words the demo never saw. Each row fine-tunes the same demo model on the same few thousand pairs of the new
domain for the same steps (`vanilla-transformer train --from_model`): every weight, every weight with replay of the
old domain's training pairs, the encoder frozen, LoRA adapters. The last two rows fine-tune every weight with
transformers' `Seq2SeqTrainer` on the same pairs and steps, for its training tokens/s beside ours: with its default
sampler (random batches of a fixed size, as `run_translation.py` runs it) and with its `group_by_length` sampler.
Exact match is greedy decoding equal to the reference, on held-out numbers of each domain; "tokens not padding" is
the share of the batches' tokens (source and target, padded) that are real.

    python -m benchmarks.finetune                           # trains the demo first (2 minutes), then the rows
    python -m benchmarks.finetune --demo outputs/demo       # a demo trained earlier (`vanilla-transformer demo`)
    python -m benchmarks.finetune --steps 20 --new-train 300 --demo-minutes 0.2   # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from pathlib import Path

from .common import command_line, log, machine_summary

# the demo's own data: `vanilla-transformer demo` draws its splits with these (its defaults); the old domain's test
# numbers are the demo's held-out ones
DEMO_TRAIN, DEMO_TEST, DEMO_SEED = 20_000, 500, 0


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, help="a trained demo folder (default: train one into WORK/demo)")
    parser.add_argument("--demo-minutes", type=float, default=2.0, help="training time of the demo, when trained here")
    parser.add_argument(
        "--demo-train-size", type=int, default=DEMO_TRAIN, help="the demo's training pairs (the demo's default)"
    )
    parser.add_argument("--work", type=Path, default=Path("outputs/benchmark_finetune"))
    parser.add_argument("--new-train", type=int, default=3000, help="training pairs of the new domain")
    parser.add_argument("--new-test", type=int, default=300, help="held-out pairs of the new domain")
    parser.add_argument("--old-test", type=int, default=300, help="held-out pairs of the demo's domain scored")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--lora-learning-rate", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=40)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--mix-ratio", type=float, default=0.3, help="share of replayed old-domain pairs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--speed-pairs", type=int, default=3, help="alternating runs of ours and Seq2SeqTrainer (full) for the ratio"
    )
    parser.add_argument("--skip-seq2seq-trainer", action="store_true")
    return parser.parse_args(argv)


def new_domain_pairs(count: int, seed: int, exclude: set[int] = frozenset()) -> tuple[list[int], list[tuple[str, str]]]:
    """`count` distinct numbers from a million to a billion: a million count of 1-3 digits (uniform in the digits),
    then a rest below a million of 0-6 digits (0 digits: none), so both parts vary in size as the demo's numbers do."""
    from vanilla_transformer.demo.number_words import english_words, german_words

    rng, numbers = random.Random(seed), []
    while len(numbers) < count:
        digits, rest_digits = rng.randint(1, 3), rng.randint(0, 6)
        millions = rng.randint(10 ** (digits - 1), 10**digits - 1)
        rest = rng.randint(10 ** (rest_digits - 1) if rest_digits > 1 else 1, 10**rest_digits - 1) if rest_digits else 0
        number = millions * 10**6 + rest
        if number not in exclude and number not in numbers:
            numbers.append(number)
    return numbers, [(english_words(n), german_words(n)) for n in numbers]


def write_domains(args, work: Path) -> tuple[Path, Path]:
    """The new domain's folder (train, validation, test) and the old domain's (the demo's train, its test)."""
    from vanilla_transformer.demo.number_words import demo_splits, write_parallel_folder

    numbers, pairs = new_domain_pairs(args.new_train + 100 + args.new_test, args.seed)
    new = write_parallel_folder(
        work / "new_domain",
        {
            "train": pairs[: args.new_train],
            "validation": pairs[args.new_train : args.new_train + 100],
            "test": pairs[args.new_train + 100 :],
        },
    )
    old_splits = demo_splits(train_size=args.demo_train_size, test_size=DEMO_TEST, seed=DEMO_SEED)
    old = write_parallel_folder(
        work / "old_domain", {"train": old_splits["train"], "test": old_splits["test"][: args.old_test]}
    )
    return new, old


def exact_match(folder_or_model, tokenizer, folder: Path, split: str = "test") -> float:
    """Greedy translations of `folder`'s split equal to its references, in %."""
    from vanilla_transformer.inference import translate
    from vanilla_transformer.tokenization import read_lines

    sources, references = read_lines(folder / f"{split}.en"), read_lines(folder / f"{split}.de")
    hypotheses = translate(
        folder_or_model.eval(), tokenizer, sources, num_beams=1, max_new_tokens=64, batch_size=250, device="cpu"
    )
    return 100 * sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)


ROWS = {
    "full fine-tuning": [],
    "full, with replay of the old domain": ["--mix_dataset", "{old}", "--mix_ratio", "{mix_ratio}"],
    "encoder frozen": ["--freeze", "encoder"],
    "LoRA": ["--lora_r", "{lora_r}", "--learning_rate", "{lora_learning_rate}"],
}


def finetune_row(args, name: str, demo: Path, new: Path, old: Path, work: Path, score: bool = True) -> dict:
    from vanilla_transformer.inference import load_for_translation
    from vanilla_transformer.training import TrainingRun, parse_arguments

    values = {"old": old, "mix_ratio": args.mix_ratio, "lora_r": args.lora_r}
    values["lora_learning_rate"] = args.lora_learning_rate
    extra = [flag.format(**values) for flag in ROWS[name]]
    output = work / name.split(",")[0].replace(" ", "_")
    flags = [
        "--from_model", str(demo), "--dataset", str(new), "--validation_split", "validation", "--test_split",
        "test", "--output_dir", str(output), "--overwrite_output_dir", "--max_steps", str(args.steps),
        "--max_tokens", str(args.max_tokens), "--learning_rate", str(args.learning_rate), "--warmup_steps",
        str(args.warmup_steps), "--lr_scheduler_type", "linear", "--save_steps", "0", "--eval_steps", "0",
        "--num_beams", "1", "--max_new_tokens", "64", "--eval_batch_size", "250", "--report_to", "none",
        "--seed", str(args.seed), "--extra_eval_datasets", f"old={old}:test", "--cache_dir", str(work / "cache"),
        *extra,
    ]  # fmt: skip
    log(f"{name}: vanilla-transformer train {' '.join(flags)}")
    run = TrainingRun(*parse_arguments(flags))
    results = run.run()
    model, tokenizer = load_for_translation(output)
    batches, _, _ = run.plan.take(0, 0, args.steps)  # the micro-batches the steps trained on (one a step)
    padded = sum(len(batch) * run.plan.lengths[batch].max(axis=0).sum() for batch in batches)
    return {
        "name": name,
        **(
            {"new_after": exact_match(model, tokenizer, new), "old_after": exact_match(model, tokenizer, old)}
            if score
            else {}
        ),
        "minutes": results["train_seconds"] / 60,
        "trainable": results["trainable_parameters"],
        "tokens_per_second": results["train_tokens"] / results["train_seconds"],
        "real_share": results["train_tokens"] / padded,
        "corpus": run.corpus,
        "plan": run.plan,
    }


TRAINER_SAMPLERS = {
    "random": "transformers' Seq2SeqTrainer, its default sampler (random batches)",
    "group_by_length": "transformers' Seq2SeqTrainer, group_by_length",
}


def seq2seq_trainer_row(
    args, sampler: str, demo: Path, new: Path, old: Path, work: Path, corpus, plan, score: bool = True
) -> dict:
    """Every weight fine-tuned by transformers' Seq2SeqTrainer: the same start, pairs (our prepared corpus), steps,
    optimizer and schedule, a batch of the mean number of pairs our token budget gave and a loader worker, as ours
    has; its `sampler` draws random batches (its default, run_translation.py's) or batches of similar source
    lengths (group_by_length)."""
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    from vanilla_transformer import VanillaTransformerForConditionalGeneration
    from vanilla_transformer.inference import load_tokenizer

    tokenizer = load_tokenizer(demo)
    model = VanillaTransformerForConditionalGeneration.from_pretrained(demo)
    epoch = plan.epoch_batches(0)
    batch_size = round(sum(len(batch) for batch in epoch) / len(epoch))
    options = {field.name for field in dataclasses.fields(Seq2SeqTrainingArguments)}
    grouping = {}
    if sampler == "group_by_length":  # the field's name changed in transformers 5.25
        grouping = {"train_sampling_strategy": sampler} if "train_sampling_strategy" in options else {sampler: True}
    training_args = Seq2SeqTrainingArguments(
        output_dir=str(work / f"seq2seq_trainer_{sampler}"),
        max_steps=args.steps,
        per_device_train_batch_size=batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        lr_scheduler_type="linear",
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-9,
        weight_decay=0.0,
        max_grad_norm=1.0,
        save_strategy="no",
        eval_strategy="no",
        logging_steps=50,
        report_to="none",
        seed=args.seed,
        dataloader_num_workers=1,
        use_cpu=True,
        **grouping,
    )

    class CountingTrainer(Seq2SeqTrainer):
        """Counts the tokens of its batches as ours counts them (source and target tokens, padding left out), and
        with the padding."""

        tokens = padded = 0

        def training_step(self, model, inputs, *rest, **options):
            self.tokens += int(inputs["attention_mask"].sum() + (inputs["labels"] != -100).sum())
            self.padded += inputs["input_ids"].numel() + inputs["labels"].numel()
            return super().training_step(model, inputs, *rest, **options)

    # as ours: the model shifts the labels into its decoder inputs, the collator only pads
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    trainer = CountingTrainer(
        model=model, args=training_args, train_dataset=corpus.train, data_collator=collator, processing_class=tokenizer
    )
    started = time.perf_counter()
    metrics = trainer.train().metrics
    seconds = time.perf_counter() - started
    return {
        "name": f"full fine-tuning, {TRAINER_SAMPLERS[sampler]}",
        **(
            {"new_after": exact_match(model, tokenizer, new), "old_after": exact_match(model, tokenizer, old)}
            if score
            else {}
        ),
        "minutes": metrics.get("train_runtime", seconds) / 60,
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "tokens_per_second": trainer.tokens / metrics.get("train_runtime", seconds),
        "real_share": trainer.tokens / trainer.padded,
        "batch_size": batch_size,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    from vanilla_transformer.demo.run import run_demo
    from vanilla_transformer.inference import load_for_translation

    args.work.mkdir(parents=True, exist_ok=True)
    demo = args.demo
    if demo is None:
        demo = args.work / "demo"
        log(f"training the demo into {demo} ({args.demo_minutes} minutes)")
        run_demo(demo, minutes=args.demo_minutes, train_size=args.demo_train_size, seed=DEMO_SEED, overwrite=True)
    new, old = write_domains(args, args.work)
    model, tokenizer = load_for_translation(demo)
    before = {"new": exact_match(model, tokenizer, new), "old": exact_match(model, tokenizer, old)}
    log(f"the demo before fine-tuning: new domain {before['new']:.1f}%, old domain {before['old']:.1f}% exact")
    # the first steps of a process fault in its buffers (a step's logits and their gradients): a short run first, so
    # that no row pays for that alone
    log("warming up: 10 steps, not reported")
    warm_up = argparse.Namespace(**{**vars(args), "steps": min(10, args.steps)})
    finetune_row(warm_up, "full fine-tuning", demo, new, old, args.work / "warm-up")
    rows = [finetune_row(args, name, demo, new, old, args.work) for name in ROWS]
    ratios = {sampler: [] for sampler in TRAINER_SAMPLERS}
    if not args.skip_seq2seq_trainer:
        corpus, plan = rows[0]["corpus"], rows[0]["plan"]
        ours = rows[0]
        for pair in range(args.speed_pairs):
            if pair:  # more pairs, alternating, so that the machine's drift hits all alike: the ratio is the median
                log(f"speed pair {pair + 1} of {args.speed_pairs}")
                ours = finetune_row(args, "full fine-tuning", demo, new, old, args.work / "speed", score=False)
            for sampler in TRAINER_SAMPLERS:
                theirs = seq2seq_trainer_row(
                    args, sampler, demo, new, old, args.work / ("speed" if pair else ""), corpus, plan, score=not pair
                )
                if not pair:
                    rows.append(theirs)
                ratios[sampler].append(ours["tokens_per_second"] / theirs["tokens_per_second"])

    print(f"Fine-tuning the demo (numbers below a million) on numbers from a million to a billion ({command_line()})")
    print(f"machine: {machine_summary()}")
    print(
        f"{args.new_train} new-domain training pairs, {args.steps} steps of at most {args.max_tokens} tokens, "
        f"exact match of greedy decoding on {args.new_test} new-domain and {args.old_test} old-domain held-out numbers"
    )
    print()
    print(
        "| run | new domain exact, before | after | old domain exact, before | after | minutes | trainable parameters "
        "| training tokens/s | tokens not padding |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['name']} | {before['new']:.1f}% | {row['new_after']:.1f}% | {before['old']:.1f}% | "
            f"{row['old_after']:.1f}% | {row['minutes']:.2f} | {row['trainable']:,} | {row['tokens_per_second']:,.0f} "
            f"| {row['real_share']:.1%} |"
        )
    full = rows[0]
    print()
    for sampler, values in ratios.items():
        if values:
            print(
                f"ours / Seq2SeqTrainer ({sampler}), training tokens/s of full fine-tuning on the same model, pairs "
                f"and steps: {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}] over {len(values)} "
                f"pairs (the table's rows are the first; its batches held {rows[-1]['batch_size']} pairs, our mean)"
            )
    print(
        f"replay: old domain {rows[1]['old_after'] - before['old']:+.1f} points; "
        f"LoRA - full, new domain: {rows[3]['new_after'] - full['new_after']:+.1f} points"
    )
    summary = {
        "before": before,
        "speed_ratios": ratios,
        "rows": [{k: v for k, v in row.items() if k not in ("corpus", "plan")} for row in rows],
    }
    (args.work / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
