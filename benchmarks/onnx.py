"""A trained model against its ONNX export on a test set: BLEU of PyTorch's generate(), ONNX Runtime in float32 and
in int8, greedy and beam; how many translations are token for token generate()'s; the largest logit difference on a
padded batch; the export's file sizes against the model's safetensors.

    python -m benchmarks.onnx --model outputs/multi30k_en_de     # Multi30k's test_2016_flickr, en -> de

Goals (issue 53): float32 logits within 1e-4 of PyTorch with padding in the batch; greedy and beam translations
identical to generate(); int8 BLEU within 0.3 of float32; float32 files at most 1.1x the safetensors.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

from vanilla_transformer.common.model_folder import ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE
from vanilla_transformer.export import export_onnx
from vanilla_transformer.inference import load_for_translation, load_onnx, translate
from vanilla_transformer.tokenization import iter_lines

from .common import command_line, log, machine_summary

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained translation model folder")
    parser.add_argument("--data", type=Path, default=DATA, help="a folder of {split}.{lang}[.gz] files")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    parser.add_argument("--sentences", type=int, default=None, help="the first N test sentences (default: all)")
    parser.add_argument("--beams", type=int, default=4, help="beam size of the beam rows")
    parser.add_argument("--work", type=Path, default=None, help="where to write the exports (default: a temporary one)")
    return parser


def read_split(folder: Path, split: str, lang: str, limit: int | None) -> list[str]:
    path = next(
        (
            folder / f"{split}.{lang}{suffix}"
            for suffix in ("", ".gz")
            if (folder / f"{split}.{lang}{suffix}").is_file()
        ),
        None,
    )
    if path is None:
        raise SystemExit(f"no {split}.{lang}[.gz] in {folder}: pass --data FOLDER")
    lines = list(iter_lines(path))
    return lines[:limit] if limit else lines


def largest_logit_difference(model, engine, tokenizer, sources: list[str], references: list[str]) -> float:
    """Teacher-forced logits of a padded batch: PyTorch in one pass, ONNX Runtime step by step with its cache."""
    inputs = tokenizer(sources, padding=True, return_tensors="pt")
    labels = tokenizer(references, padding=True, return_tensors="pt")["input_ids"]
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    with torch.no_grad():
        expected = model(**inputs, decoder_input_ids=decoder_input_ids).logits
    encoded = engine.get_encoder()(**inputs)
    cache, steps = None, []
    for position in range(decoder_input_ids.shape[1]):
        output = engine(
            attention_mask=inputs["attention_mask"],
            decoder_input_ids=decoder_input_ids[:, : position + 1],
            encoder_outputs=encoded,
            cache=cache,
        )
        cache = output.cache
        steps.append(output.logits[:, -1])
    return float((torch.stack(steps, dim=1) - expected).abs().max())


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sources = read_split(args.data, args.split, args.source_lang, args.sentences)
    references = read_split(args.data, args.split, args.target_lang, args.sentences)
    model, tokenizer = load_for_translation(args.model, device="cpu")
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        sizes = {"safetensors": (Path(args.model) / "model.safetensors").stat().st_size}
        engines = {"PyTorch generate()": model}
        for name, quantize in (("ONNX Runtime float32", None), ("ONNX Runtime int8", "int8")):
            log(f"export onnx {quantize or 'float32'} ...")
            folder = export_onnx(args.model, work / (quantize or "float32"), quantize=quantize, force=True)
            sizes[name] = sum((folder / file).stat().st_size for file in (*ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE))
            engines[name] = load_onnx(folder)[0]
        difference = largest_logit_difference(
            model, engines["ONNX Runtime float32"], tokenizer, sources[:32], references[:32]
        )
        rows, outputs = [], {}
        for decoding, beams in (("greedy", 1), (f"beam {args.beams}", args.beams)):
            for name, engine in engines.items():
                log(f"{name}, {decoding} ...")
                start = time.perf_counter()
                outputs[name, decoding] = translate(engine, tokenizer, sources, num_beams=beams)
                seconds = time.perf_counter() - start
                reference = outputs["PyTorch generate()", decoding]
                same = sum(a == b for a, b in zip(outputs[name, decoding], reference, strict=True))
                score = sacrebleu.corpus_bleu(outputs[name, decoding], [references]).score
                rows.append((name, decoding, score, same, seconds))
    print(f"### {Path(args.model).name}: PyTorch against its ONNX export, {args.split} {args.source_lang}->"
          f"{args.target_lang} ({len(sources)} sentences)")  # fmt: skip
    print(f"\n- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; machine: {machine_summary()}")
    print(f"- Command: `{command_line()}`\n")
    print("| engine | decoding | BLEU | identical to generate() | seconds |")
    print("|---|---|---:|---:|---:|")
    for name, decoding, score, same, seconds in rows:
        print(f"| {name} | {decoding} | {score:.2f} | {same}/{len(sources)} | {seconds:.1f} |")
    scores = {(name, decoding): score for name, decoding, score, _, _ in rows}
    print()
    print(f"- Largest logit difference, float32 against PyTorch, 32 padded sentences teacher-forced: {difference:.1e}"
          " (goal: at most 1e-4)")  # fmt: skip
    for decoding in ("greedy", f"beam {args.beams}"):
        gap = scores["ONNX Runtime int8", decoding] - scores["ONNX Runtime float32", decoding]
        print(f"- int8 BLEU minus float32 BLEU, {decoding}: {gap:+.2f} (goal: within 0.3)")
    print(f"- Files: float32 graphs and weights {sizes['ONNX Runtime float32'] / 2**20:.1f} MiB, "
          f"{sizes['ONNX Runtime float32'] / sizes['safetensors']:.3f}x the safetensors "
          f"({sizes['safetensors'] / 2**20:.1f} MiB; goal: at most 1.1x); "
          f"int8 {sizes['ONNX Runtime int8'] / 2**20:.1f} MiB, "
          f"{sizes['ONNX Runtime int8'] / sizes['ONNX Runtime float32']:.3f}x float32")  # fmt: skip


if __name__ == "__main__":
    main()
