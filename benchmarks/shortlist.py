"""A lexical shortlist on a trained translation model: its cost in BLEU and the rows it keeps, for greedy and beam
search, and how long building one takes and the memory it needs, on the model's corpus and at the paper's scale.

The model (a trained folder, e.g. the Multi30k recipe) translates the test split without and with shortlists of
several sizes K (its candidates a source token; N, the frequent target tokens, fixed), built from the training split
prepared with the model's tokenizer. Printed: BLEU4 (lowercased, 13a-tokenized) and chrF, the difference to the full
computation, the share of translations identical to it, and the mean rows a batch keeps; then the build's seconds and
peak memory (a fresh process each), on the model's corpus and, with --pairs, on a synthetic corpus of Multi30k pairs
joined two by two (benchmarks/data_path.py's, WMT14-length pairs).

    python -m benchmarks.shortlist --model outputs/multi30k_en_de
    python -m benchmarks.shortlist --model outputs/multi30k_en_de --pairs 1000000 --work /tmp/shortlist
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vanilla_transformer.lexical_shortlist import FREQUENT

from .common import command_line, log, machine_summary

REPO = Path(__file__).resolve().parents[1]
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a trained translation folder (its tokenizer encodes the corpus)")
    parser.add_argument("--data", type=Path, default=MULTI30K, help="the model's corpus: {split}.{lang}[.gz] files")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--candidates", type=int, nargs="+", default=[20, 50, 100], help="the K measured")
    parser.add_argument("--frequent", type=int, default=FREQUENT, help="N, the most frequent target tokens")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="the decodings measured")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences a batch (translate's default)")
    parser.add_argument("--test-sentences", type=int, help="the first N test sentences only (a smoke run)")
    parser.add_argument("--pairs", type=int, help="also build at this many synthetic training pairs")
    parser.add_argument("--work", type=Path, help="folder for the prepared corpora (default: a temporary one)")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def data_arguments(args, dataset: Path, validation: str | None, test: str | None):
    from vanilla_transformer.training.arguments import DataArguments

    return DataArguments(
        dataset=str(dataset),
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        train_split=SPLITS["train"],
        validation_split=validation or "",
        test_split=test,
        cache_dir=str(args.work / "cache"),
    )


def child(argv: list[str]) -> None:
    """Build the shortlist of a prepared folder's training split for a model; print seconds and peak RSS as JSON."""
    model, dataset, candidates, frequent = argv[0], argv[1], int(argv[2]), int(argv[3])
    from vanilla_transformer.common.model_folder import load_config
    from vanilla_transformer.lexical_shortlist import MIN_COUNT
    from vanilla_transformer.shortlist.build import build_shortlist
    from vanilla_transformer.training.corpus import load_prepared

    corpus, config = load_prepared(Path(dataset)), load_config(model)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    special = [*corpus.tokenizer.all_special_ids, config.decoder_start_token_id, config.eos_token_id]
    build_shortlist(corpus.train, config.vocab_size, config.target_vocab_size, special, candidates, frequent, MIN_COUNT)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {"seconds": seconds, "peak_rss_mib": peak, "before_mib": before, "pairs": corpus.train.num_rows}
    print("RESULT " + json.dumps(report), flush=True)


def measure_build(args, prepared: Path, candidates: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.shortlist", "--child", str(args.model), str(prepared)]
    command += [str(candidates), str(args.frequent)]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if completed.returncode:
        sys.exit(f"the build failed:\n{completed.stderr[-4000:]}")
    return next(json.loads(line[7:]) for line in completed.stdout.splitlines() if line.startswith("RESULT "))


def counting_rows(shortlist, seen: list[int]):
    """The shortlist, recording how many rows each batch keeps."""
    rows = shortlist.rows

    def recorded(*arguments, **keywords):
        kept = rows(*arguments, **keywords)
        seen.append(len(kept))
        return kept

    shortlist.rows = recorded
    return shortlist


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.child is not None:
        return child(args.child)
    if args.model is None:
        sys.exit("--model FOLDER: a trained translation model")
    from vanilla_transformer.inference import load_for_translation, translate
    from vanilla_transformer.lexical_shortlist import MIN_COUNT
    from vanilla_transformer.shortlist.build import build_shortlist
    from vanilla_transformer.tokenization import tokenizer_identity
    from vanilla_transformer.training.corpus import prepare_corpus
    from vanilla_transformer.training.evaluation import corpus_scores

    args.work = args.work or Path(tempfile.mkdtemp(prefix="shortlist-"))
    model, tokenizer = load_for_translation(args.model, device="cpu")
    corpus = prepare_corpus(data_arguments(args, args.data, None, SPLITS["test"]), tokenizer)
    test = corpus.test
    count = min(args.test_sentences or test.num_rows, test.num_rows)
    sources, references = list(test[args.source_lang])[:count], list(test[args.target_lang])[:count]
    config = model.config
    special = [*tokenizer.all_special_ids, config.decoder_start_token_id, config.pad_token_id, config.eos_token_id]

    rows, full = [], {}
    for beams in args.beams:
        log(f"the full computation, beam {beams}: translating {count:,} sentences")
        started = time.perf_counter()
        hypotheses = translate(model, tokenizer, sources, num_beams=beams, batch_size=args.batch_size)
        full[beams] = hypotheses
        scores = corpus_scores(hypotheses, references)
        rows.append(["none", beams, scores, hypotheses, None, time.perf_counter() - started])
    for candidates in args.candidates:
        shortlist = build_shortlist(
            corpus.train,
            config.vocab_size,
            config.target_vocab_size,
            special,
            candidates,
            args.frequent,
            MIN_COUNT,
            metadata={"tokenizer": tokenizer_identity(tokenizer)},
        )
        for beams in args.beams:
            log(f"shortlist K={candidates}, beam {beams}")
            seen: list[int] = []
            model.lexical_shortlist = counting_rows(shortlist, seen)
            started = time.perf_counter()
            hypotheses = translate(
                model, tokenizer, sources, num_beams=beams, batch_size=args.batch_size, shortlist=True
            )
            seconds = time.perf_counter() - started
            scores = corpus_scores(hypotheses, references)
            rows.append([f"K={candidates}, N={args.frequent}", beams, scores, hypotheses, seen, seconds])

    builds = [("the model's corpus", measure_build(args, corpus.folder, args.candidates[-1]))]
    if args.pairs:
        from .data_path import write_corpus

        synthetic = args.work / f"corpus-{args.pairs}"
        log(f"writing {args.pairs:,} pairs to {synthetic} and preparing them with the model's tokenizer")
        write_corpus(synthetic, args.pairs, args.data)
        started = time.perf_counter()
        prepared = prepare_corpus(data_arguments(args, synthetic, "val", None), tokenizer)
        log(f"prepared in {time.perf_counter() - started:.0f} s")
        builds.append((f"{args.pairs:,} synthetic pairs", measure_build(args, prepared.folder, args.candidates[-1])))

    print(f"\n{command_line()}\n{machine_summary()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"model {args.model} ({config.target_vocab_size:,} target tokens); {count:,} sentences of "
        f"{args.data}/{SPLITS['test']}, batches of {args.batch_size}; shortlists from the {corpus.train.num_rows:,} "
        "training pairs\n"
    )
    print("| shortlist | decoding | BLEU4 (lowercased) | chrF | BLEU4 - full | identical to full | rows a batch | s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, beams, scores, hypotheses, seen, seconds in rows:
        base = next(row for row in rows if row[0] == "none" and row[1] == beams)
        same = sum(a == b for a, b in zip(hypotheses, full[beams], strict=True)) / count
        kept = f"{sum(seen) / len(seen):,.0f} ({sum(seen) / len(seen) / config.target_vocab_size:.1%})" if seen else ""
        print(
            f"| {name} | {'greedy' if beams == 1 else f'beam {beams}'} | {scores['bleu_lowercased']:.2f} | "
            f"{scores['chrf']:.2f} | {scores['bleu_lowercased'] - base[2]['bleu_lowercased']:+.2f} | {same:.1%} | "
            f"{kept or config.target_vocab_size} | {seconds:.1f} |"
        )
    print(f"\nbuilding a shortlist (K={args.candidates[-1]}, N={args.frequent}), each in a fresh process:\n")
    print("| corpus | pairs | seconds | peak RSS (MB) | peak RSS before the build (MB) |\n|---|---:|---:|---:|---:|")
    for name, build in builds:
        print(
            f"| {name} | {build['pairs']:,} | {build['seconds']:.1f} | {build['peak_rss_mib']:,.0f} | "
            f"{build['before_mib']:,.0f} |"
        )


if __name__ == "__main__":
    main()
