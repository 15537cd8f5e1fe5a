"""Sequence-level distillation (Kim and Rush 2016) on Multi30k EN->DE, on the CPU.

The teacher (the Multi30k recipe: 4+4 layers, d_model 128) translates the training sources with beam 5
(`vanilla-transformer translate-corpus`). Two students of one small shape, a deep encoder and a shallow decoder (Kasai
et al. 2021: 4 encoder layers, 1 decoder layer), train for the same minutes with the recipe's other settings and the
teacher's tokenizer: one on the references, one on the teacher's translations. Each model translates
test_2016_flickr; BLEU4 (lowercased, 13a-tokenized) and chrF are scored on the PyTorch float32 translations, and new
tokens/s (the translations' tokens, `</s>` included, per second of translating the test set) are measured in PyTorch
float32 and through the CTranslate2 export in int8, on the same sentences and batches.

    python -m benchmarks.distill                                    # trains the teacher first (the recipe's hour)
    python -m benchmarks.distill --teacher outputs/multi30k_en_de   # a recipe model trained earlier
    python -m benchmarks.distill --teacher-minutes 0.1 --student-minutes 0.1 --train-sentences 300 \\
        --test-sentences 30 --max-new-tokens 8                      # a smoke run
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import time
from pathlib import Path

from .common import command_line, log, machine_summary

REPO = Path(__file__).resolve().parents[1]
SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", type=Path, help="a trained recipe folder (default: train one into WORK/teacher)")
    parser.add_argument("--teacher-minutes", type=float, help="when the teacher is trained here: its minutes")
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_en_de.yaml"))
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--work", type=Path, default=Path("outputs/benchmark_distill"))
    parser.add_argument("--student-minutes", type=float, default=15.0, help="training time of each student")
    parser.add_argument("--student-encoder-layers", type=int, default=4)
    parser.add_argument("--student-decoder-layers", type=int, default=1)
    parser.add_argument(
        "--student-norm-placement",
        default="pre",
        help="pre: Pre-LN (Post-LN decoders of 1 or 2 layers stayed on the target-only plateau: docs/experiments/)",
    )
    parser.add_argument("--teacher-beams", type=int, default=5, help="beam of the teacher's translations")
    parser.add_argument(
        "--teacher-engine",
        choices=("pytorch", "ctranslate2"),
        default="pytorch",
        help="what translates the training sources (ctranslate2: the teacher's float32 export)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences a batch, in every translation")
    parser.add_argument(
        "--max-new-tokens", type=int, default=100, help="longest translation, in every translation (the recipe's)"
    )
    parser.add_argument("--train-sentences", type=int, help="the first N training pairs only (a smoke run)")
    parser.add_argument("--test-sentences", type=int, help="the first N validation and test pairs only (a smoke run)")
    return parser.parse_args(argv)


def subset_folder(args: argparse.Namespace) -> Path:
    """The data, or the first lines of each split when a smoke run asks for fewer."""
    if args.train_sentences is None and args.test_sentences is None:
        return args.data
    from vanilla_transformer.tokenization import iter_lines

    folder = args.work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    for role, split in SPLITS.items():
        limit = args.train_sentences if role == "train" else args.test_sentences
        for lang in ("en", "de"):
            lines = list(itertools.islice(iter_lines(args.data / f"{split}.{lang}.gz"), limit))
            (folder / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


def recipe_arguments(args, data: Path, output: Path, *overrides: str):
    from .multi30k import training_arguments

    flags = ["--output_dir", str(output), "--overwrite_output_dir", "--max_new_tokens", str(args.max_new_tokens)]
    flags += overrides
    if args.test_sentences is not None:
        flags += ["--max_eval_samples", str(args.test_sentences)]
    return training_arguments(args.config, str(data), flags)


def train_teacher(args, data: Path) -> tuple[Path, float]:
    from vanilla_transformer.training import train

    folder = args.work / "teacher"
    minutes = [] if args.teacher_minutes is None else ["--max_train_minutes", str(args.teacher_minutes)]
    log(f"training the teacher (the Multi30k recipe) into {folder}")
    started = time.perf_counter()
    train(*recipe_arguments(args, data, folder, *minutes))
    return folder, time.perf_counter() - started


def translate_training_sources(args, teacher: Path, data: Path) -> tuple[Path, float]:
    """The teacher's beam translations of the training sources, as a corpus folder (validation and test carried)."""
    from vanilla_transformer.corpus_translation import CorpusTranslationArguments, translate_corpus

    model, engine = teacher, "pytorch"
    if args.teacher_engine == "ctranslate2":
        from vanilla_transformer.export.ctranslate2_spec import export_ctranslate2

        model, engine = export_ctranslate2(teacher, args.work / "teacher-ct2-float32", force=True), "ctranslate2"
    output = args.work / "distilled-corpus"
    shutil.rmtree(output, ignore_errors=True)  # translated anew, so that its minutes are this run's
    log(f"the teacher translates the training sources into {output} (beam {args.teacher_beams}, {engine})")
    started = time.perf_counter()
    translate_corpus(
        CorpusTranslationArguments(
            model=str(model),
            output_dir=str(output),
            dataset=str(data),
            train_split=SPLITS["train"],
            validation_split=SPLITS["validation"],
            test_split=SPLITS["test"],
            engine=engine,
            num_beams=args.teacher_beams,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
        )
    )
    return output, time.perf_counter() - started


def train_student(args, name: str, corpus: Path, teacher: Path) -> tuple[Path, float]:
    from vanilla_transformer.training import train

    folder = args.work / name
    shape = ["--encoder_layers", str(args.student_encoder_layers), "--decoder_layers", str(args.student_decoder_layers)]
    shape += ["--norm_placement", args.student_norm_placement]
    log(f"training {name} on {corpus} for {args.student_minutes} minutes")
    started = time.perf_counter()
    train(
        *recipe_arguments(
            args,
            corpus,
            folder,
            *shape,
            "--max_train_minutes",
            str(args.student_minutes),
            "--tokenizer",
            str(teacher),  # the teacher's vocabulary for both students: the data is all that differs
        )
    )
    return folder, time.perf_counter() - started


def measure(model, tokenizer, sources: list[str], references: list[str], num_beams: int, args) -> dict:
    """Translate the test sources: the scores, and new tokens/s (the translations' tokens by the model's tokenizer,
    so that both engines are counted alike)."""
    from vanilla_transformer.inference import translate
    from vanilla_transformer.training.evaluation import corpus_scores

    started = time.perf_counter()
    hypotheses = translate(
        model, tokenizer, sources, num_beams=num_beams, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens
    )
    seconds = time.perf_counter() - started
    tokens = sum(len(ids) for ids in tokenizer(text_target=hypotheses)["input_ids"])
    scores = corpus_scores(hypotheses, references)
    return {"bleu4": scores["bleu_lowercased"], "chrf": scores["chrf"], "tokens_per_second": tokens / seconds}


def measure_model(args, name: str, folder: Path, beams: list[int], sources, references) -> list[dict]:
    from vanilla_transformer.export.ctranslate2_spec import export_ctranslate2
    from vanilla_transformer.inference import load_ctranslate2, load_for_translation

    model, tokenizer = load_for_translation(folder, device="cpu")
    exported = export_ctranslate2(folder, args.work / f"{folder.name}-ct2-int8", quantization="int8", force=True)
    ct2_model, ct2_tokenizer = load_ctranslate2(exported, "cpu", "int8")
    rows = []
    for engine_model, engine_tokenizer in ((model, tokenizer), (ct2_model, ct2_tokenizer)):
        # a first batch untimed: the first calls of a process fault in their buffers
        measure(engine_model, engine_tokenizer, sources[: args.batch_size], references[: args.batch_size], 1, args)
    for num_beams in beams:
        log(f"{name}, {'greedy' if num_beams == 1 else f'beam {num_beams}'}: translating the test set")
        ours = measure(model, tokenizer, sources, references, num_beams, args)
        ct2 = measure(ct2_model, ct2_tokenizer, sources, references, num_beams, args)
        rows.append(
            {
                "model": name,
                "num_beams": num_beams,
                **ours,
                "ct2_int8_bleu4": ct2["bleu4"],
                "ct2_int8_tokens_per_second": ct2["tokens_per_second"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    from vanilla_transformer.tokenization import read_lines

    args.work.mkdir(parents=True, exist_ok=True)
    data = subset_folder(args)
    stages = {}
    teacher = args.teacher
    if teacher is None:
        teacher, stages["teacher training"] = train_teacher(args, data)
    else:
        recorded = json.loads((teacher / "results.json").read_text()).get("train_seconds")
        if recorded:
            stages["teacher training (given folder, its results.json)"] = recorded
    corpus, stages["teacher translation of the training sources"] = translate_training_sources(args, teacher, data)
    references_student, stages["student on references, training"] = train_student(
        args, "student-references", data, teacher
    )
    distilled_student, stages["distilled student, training"] = train_student(args, "student-distilled", corpus, teacher)

    test_name = SPLITS["test"]
    suffix = "" if (data / f"{test_name}.en").exists() else ".gz"
    sources = read_lines(data / f"{test_name}.en{suffix}")
    references = read_lines(data / f"{test_name}.de{suffix}")
    rows = measure_model(args, "teacher", teacher, [args.teacher_beams], sources, references)
    rows += measure_model(args, "student on references", references_student, [1, 5], sources, references)
    rows += measure_model(args, "distilled student", distilled_student, [1, 5], sources, references)

    corpus_record = json.loads((corpus / "translation.json").read_text())
    print(f"Sequence-level distillation, Multi30k EN->DE ({command_line()})")
    print(f"machine: {machine_summary()}")
    print(
        f"teacher {teacher}; students: the recipe with {args.student_encoder_layers} encoder and "
        f"{args.student_decoder_layers} decoder layer(s), {args.student_norm_placement}-LN, {args.student_minutes} "
        "minutes each, the teacher's "
        f"tokenizer; the teacher's beam-{args.teacher_beams} translations of "
        f"{corpus_record['sentences'][SPLITS['train']]:,} training sources; scored on {len(sources):,} sentences of "
        f"{test_name}"
    )
    print()
    print(
        "| model | decoding | BLEU4 (lowercased) | chrF | new tokens/s, PyTorch float32 | new tokens/s, CTranslate2 "
        "int8 | BLEU4, CTranslate2 int8 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        decoding = "greedy" if row["num_beams"] == 1 else f"beam {row['num_beams']}"
        print(
            f"| {row['model']} | {decoding} | {row['bleu4']:.2f} | {row['chrf']:.2f} | "
            f"{row['tokens_per_second']:,.0f} | {row['ct2_int8_tokens_per_second']:,.0f} | "
            f"{row['ct2_int8_bleu4']:.2f} |"
        )
    print()
    print("| stage | minutes |")
    print("|---|---:|")
    for stage, seconds in stages.items():
        print(f"| {stage} | {seconds / 60:.1f} |")
    teacher_row = rows[0]
    by = {(row["model"], row["num_beams"]): row for row in rows}
    references_greedy, references_beam = by[("student on references", 1)], by[("student on references", 5)]
    distilled_greedy, distilled_beam = by[("distilled student", 1)], by[("distilled student", 5)]
    print()
    print(
        f"distilled - on references, BLEU4: greedy {distilled_greedy['bleu4'] - references_greedy['bleu4']:+.2f}, "
        f"beam 5 {distilled_beam['bleu4'] - references_beam['bleu4']:+.2f} (goal: +1 or more)"
    )
    print(
        f"teacher beam {args.teacher_beams} - distilled greedy, BLEU4: "
        f"{teacher_row['bleu4'] - distilled_greedy['bleu4']:.2f} (goal: 1.5 or less)"
    )
    print(
        f"distilled greedy / teacher beam {args.teacher_beams}, new tokens/s: PyTorch float32 "
        f"{distilled_greedy['tokens_per_second'] / teacher_row['tokens_per_second']:.2f}x, CTranslate2 int8 "
        f"{distilled_greedy['ct2_int8_tokens_per_second'] / teacher_row['ct2_int8_tokens_per_second']:.2f}x "
        "(goal: 3x or more)"
    )
    summary = {"machine": machine_summary(), "stages_seconds": stages, "rows": rows, "teacher": str(teacher)}
    (args.work / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
