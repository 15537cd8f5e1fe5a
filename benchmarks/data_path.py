"""The data path at the paper's scale, on a synthetic corpus: pairs of Multi30k sentences joined two by two (so a pair
is as long as a WMT14 one, ~27 words), written as aligned text files. It measures, each in a fresh process:

- text to the first training step with an empty corpus cache, its peak resident memory, and the time the preparation
  took (reading, the tokenizer, tokenizing, writing the cache);
- the same from the cache (a second run, a resume, or another process of the same run);
- the share of step time the training loop waited for micro-batches, for a tiny model and for the paper's base model,
  with 25,000-token steps;
- with `--two-processes`, two processes of one run (gloo on the CPU, as `accelerate launch`): how many prepared the
  corpus, and each one's resident pages of the memory-mapped corpus (Rss) beside its proportional share (Pss).

    python -m benchmarks.data_path --pairs 1000000 [--two-processes] [--base-steps 3]

`--code FOLDER` runs the measurements on another checkout of the package (say the code before the prepared corpus:
`git worktree add /tmp/before <commit>`), where the preparation and the workers do not exist.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import command_line, free_port, log, machine_summary

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
TINY = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=256, decoder_ffn_dim=256)  # fmt: skip
BASE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
            encoder_ffn_dim=2048, decoder_ffn_dim=2048)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="training pairs of the synthetic corpus")
    parser.add_argument("--multi30k", type=Path, default=MULTI30K, help="the folder of Multi30k's train.{en,de}.gz")
    parser.add_argument("--work", type=Path, help="folder for the corpus and the caches (default: a temporary one)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=25_000, help="tokens of a step's micro-batch")
    parser.add_argument("--tiny-steps", type=int, default=20, help="steps of the tiny model for the data wait")
    parser.add_argument("--base-steps", type=int, default=3, help="steps of the base model (0: skip)")
    parser.add_argument("--two-processes", action="store_true", help="also run two processes of one run")
    parser.add_argument("--code", type=Path, help="a checkout whose package to measure instead of this one")
    parser.add_argument(
        "--write-only", action="store_true", help="write the corpus to WORK/corpus-PAIRS and stop (for other runs)"
    )
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


# --------------------------------------------------------------------------------------------- the corpus


def write_corpus(folder: Path, pairs: int, multi30k: Path, seed: int = 0) -> None:
    """train.{en,de}: `pairs` pairs of two Multi30k sentences drawn at random and joined; val.{en,de}: Multi30k's
    own validation split."""
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "train.de").is_file() and sum(1 for _ in (folder / "train.de").open()) == pairs:
        return
    sentences = {}
    for lang in ("en", "de"):
        with gzip.open(multi30k / f"train.{lang}.gz", "rt", encoding="utf-8") as file:
            sentences[lang] = file.read().splitlines()
    rng = random.Random(seed)
    count = len(sentences["en"])
    with (folder / "train.en").open("w") as english, (folder / "train.de").open("w") as german:
        for _ in range(pairs):
            first, second = rng.randrange(count), rng.randrange(count)
            english.write(f"{sentences['en'][first]} {sentences['en'][second]}\n")
            german.write(f"{sentences['de'][first]} {sentences['de'][second]}\n")
    for lang in ("en", "de"):
        shutil.copy(multi30k / f"val.{lang}.gz", folder / f"val.{lang}.gz")


# ------------------------------------------------------------------------------- one process: the first steps


def corpus_pages() -> dict[str, float]:
    """MiB of this process's mappings of prepared Arrow files: resident (Rss) and its proportional share (Pss),
    which halves when two processes map the same pages."""
    totals, inside = {"rss_mib": 0.0, "pss_mib": 0.0}, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and "-" in fields[0]:  # a mapping's header: range perms offset dev inode [path]
            inside = len(fields) >= 6 and fields[5].endswith(".arrow")
        elif inside and fields[0] in ("Rss:", "Pss:"):
            totals[f"{fields[0][:-1].lower()}_mib"] += int(fields[1]) / 1024
    return totals


def child(argv: list[str]) -> None:
    """Train `steps` steps of `model` and print what it took as one JSON line; the times count from `started`, the
    moment the parent launched the process (interpreter start and imports included)."""
    started, steps, model = float(argv[0]), int(argv[1]), argv[2]
    flags = argv[3:]
    from vanilla_transformer.training import TrainingRun, parse_arguments
    from vanilla_transformer.training import corpus as corpus_module

    if model == "prepare":  # the preparation alone, for its peak memory
        corpus_module.prepare_corpus(parse_arguments(flags)[1])
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps({"rank": 0, "ready_s": time.time() - started, "peak_rss_mib": peak}), flush=True)
        return

    builds = []
    if hasattr(corpus_module, "build_corpus"):
        build = corpus_module.build_corpus
        corpus_module.build_corpus = lambda *args: builds.append(1) or build(*args)
    sizes = [item for name, value in (BASE if model == "base" else TINY).items() for item in (f"--{name}", str(value))]
    run = TrainingRun(*parse_arguments([*flags, *sizes]))
    ready = time.time() - started
    run.resume()
    run.model.train()
    if hasattr(run, "start_micro_batches"):
        run.start_micro_batches()
    step_seconds, waits = [], []
    for _ in range(steps):
        waited, begun = getattr(run, "data_wait", 0.0), time.perf_counter()
        run.train_step()
        step_seconds.append(time.perf_counter() - begun)
        waits.append(getattr(run, "data_wait", 0.0) - waited)
        if len(step_seconds) == 1:
            first_step = time.time() - started
    later = slice(1, None) if steps > 1 else slice(None)  # the first step also starts the loader's workers
    if model == "tiny-read-all":  # every page of the training split read, as an epoch would: what is resident then
        import pyarrow.compute as pc

        table = run.corpus.train.with_format("arrow")[:]
        sum(pc.sum(pc.list_flatten(table[column])).as_py() for column in ("input_ids", "labels"))
    report = {
        "rank": run.accelerator.process_index,
        "ready_s": ready,
        "first_step_s": first_step,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": sum(step_seconds[later]) / len(step_seconds[later]),
        "data_wait_share": sum(waits[later]) / sum(step_seconds[later]),
        "builds": len(builds),
        **corpus_pages(),
    }
    run.micro_batches = None
    print("RESULT " + json.dumps(report), flush=True)


def launch(args, corpus: Path, cache: Path, model: str, steps: int, processes: int = 1) -> list[dict]:
    flags = [
        "--dataset", str(corpus), "--validation_split", "val", "--test_split", "",
        "--vocab_size", str(args.vocab_size), "--cache_dir", str(cache),
        "--output_dir", tempfile.mkdtemp(dir=args.work), "--max_tokens", str(args.max_tokens),
        "--max_steps", "1000000", "--warmup_steps", "100", "--save_steps", "0", "--eval_steps", "0",
        "--report_to", "none", "--disable_progress_bar", "--use_cpu",
    ]  # fmt: skip
    if args.code is not None:  # an older checkout knows neither the cache folder nor the workers
        flags = [flag for flag in flags if flag not in ("--cache_dir", str(cache))]
    python = [sys.executable]
    if processes > 1:
        # a free rendezvous port: another run on the machine (a parallel test) may hold accelerate's default
        python += ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
                   "--num_machines", "1", "--main_process_port", str(free_port()), "--mixed_precision", "no",
                   "--dynamo_backend", "no"]  # fmt: skip
    # the script by its path, so that PYTHONPATH decides which package it measures
    command = [*python, str(Path(__file__).resolve()), "--child", str(time.time()), str(steps), model, *flags]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(args.code or ""), str(REPO)]))}
    if args.code is not None:
        env["HF_DATASETS_CACHE"] = str(cache)  # where the old code's datasets.map writes its own cache
    log(f"running {model} x{processes}: {' '.join(command[-4:])}")
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    if completed.returncode:
        sys.exit(f"the measured run failed:\n{completed.stderr[-4000:]}")
    reports = [json.loads(line[7:]) for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    return sorted(reports, key=lambda report: report["rank"])


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.child is not None:
        return child(args.child)
    args.work = args.work or Path(tempfile.mkdtemp(prefix="data-path-"))
    corpus = args.work / f"corpus-{args.pairs}"
    log(f"writing {args.pairs:,} pairs to {corpus}")
    write_corpus(corpus, args.pairs, args.multi30k)
    if args.write_only:
        return
    caches = args.work / "caches"
    shutil.rmtree(caches, ignore_errors=True)
    rows = [
        ("pairs", f"{args.pairs:,}"),
        ("corpus text (MB)", f"{sum(f.stat().st_size for f in corpus.glob('train.*')) / 1e6:,.0f}"),
    ]
    if args.code is None:
        prepared = launch(args, corpus, caches / "prepared", "prepare", 0)[0]
        rows += [
            ("prepare alone, empty cache (s)", f"{prepared['ready_s']:.1f}"),
            ("peak RSS of the preparation (GB)", f"{prepared['peak_rss_mib'] / 1024:.2f}"),
        ]
    first = launch(args, corpus, caches / "one", "tiny", args.tiny_steps)[0]
    rows += [
        ("text to the first step, empty cache (s)", f"{first['first_step_s']:.1f}"),
        ("  of which until corpus and model were ready (s)", f"{first['ready_s']:.1f}"),
        ("peak RSS of that process, its steps included (GB)", f"{first['peak_rss_mib'] / 1024:.2f}"),
    ]
    again = launch(args, corpus, caches / "one", "tiny", args.tiny_steps)[0]
    rows += [
        ("text to the first step, from the cache (s)", f"{again['first_step_s']:.1f}"),
        ("  of which until corpus and model were ready (s)", f"{again['ready_s']:.1f}"),
        (f"tiny model: step (s), data wait ({args.max_tokens:,}-token steps)",
         f"{again['step_s']:.3f}, {again['data_wait_share']:.1%}"),
    ]  # fmt: skip
    if args.base_steps:
        base = launch(args, corpus, caches / "one", "base", args.base_steps)[0]
        rows.append(("base model: step (s), data wait", f"{base['step_s']:.2f}, {base['data_wait_share']:.1%}"))
    if args.two_processes:
        two = launch(args, corpus, caches / "two", "tiny-read-all", 3, processes=2)
        rows += [
            ("two processes, empty cache: preparations", str(sum(report["builds"] for report in two))),
            ("two processes: first step (s)", ", ".join(f"{report['first_step_s']:.1f}" for report in two)),
            ("two processes, the training split read whole: its pages Rss / Pss per process (MB)",
             ", ".join(f"{r['rss_mib']:.0f} / {r['pss_mib']:.0f}" for r in two)),
        ]  # fmt: skip
    print(f"\n{command_line()}\n{machine_summary()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| measurement | value |\n|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
