"""Multi30k EN->DE: train with a config (or evaluate an existing folder) and print the test scores.

    python benchmarks/multi30k.py --config configs/multi30k_en_de.yaml          # train, then score
    python benchmarks/multi30k.py --evaluate outputs/multi30k_en_de             # score a trained folder

Scores on the test split: sacreBLEU (cased, detokenized, 13a), BLEU4 on lowercased 13a-tokenized text (the figure
published Multi30k results report) and chrF, with the beam size, wall time and machine.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from speed import cpu_model_name  # noqa: E402  (a sibling script, found through the path entry above)


def machine() -> str:
    """The CPU's model and the widest vector instructions torch uses on it: the recipe's hour holds as many updates
    as the CPU allows, and two '2-CPU' machines (AMD EPYC with AVX2, Intel Xeon with AVX512) differed 1.5-2.2x a
    step in the runs on record (0.67 vs 0.45 s with vocabulary 8000, 0.88 vs 0.40 s with 5000)."""
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    return (
        f"{cpu_model_name()} ({torch.backends.cpu.get_cpu_capability()}), {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )


def evaluate_folder(folder: Path, data: str, split: str, num_beams: int, batch_size: int) -> dict:
    from vanilla_transformer.inference.translate import load_for_translation, translate
    from vanilla_transformer.training.data import load_parallel
    from vanilla_transformer.training.evaluation import corpus_scores

    model, tokenizer = load_for_translation(str(folder))
    test = load_parallel(data, "en", "de", split)
    started = time.time()
    hypotheses = translate(model, tokenizer, list(test["en"]), num_beams=num_beams, batch_size=batch_size)
    return {
        "split": split,
        "sentences": len(hypotheses),
        "num_beams": num_beams,
        "translate_seconds": round(time.time() - started, 1),
        **{name: round(value, 2) for name, value in corpus_scores(hypotheses, list(test["de"])).items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_en_de.yaml"))
    parser.add_argument("--evaluate", type=Path, help="score this trained folder instead of training")
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--num-beams", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    args, train_overrides = parser.parse_known_args()

    folder = args.evaluate
    started = time.time()
    if folder is None:
        from vanilla_transformer.training import parse_arguments, train

        model_args, data_args, train_args = parse_arguments(
            ["--config", args.config, "--dataset", args.data, *train_overrides]
        )
        results = train(model_args, data_args, train_args)
        folder = Path(train_args.output_dir)
        print(json.dumps(results, indent=2))
    scores = evaluate_folder(folder, args.data, args.split, args.num_beams, args.batch_size)
    scores.update(folder=str(folder), wall_seconds=round(time.time() - started, 1), machine=machine())
    print(json.dumps(scores, indent=2))
    print(
        f"| {scores['split']} | {scores['bleu_lowercased']:.1f} | {scores['bleu']:.1f} | {scores['chrf']:.1f} | "
        f"{scores['num_beams']} | {scores['wall_seconds'] / 60:.0f} min | {scores['machine']} |"
    )


if __name__ == "__main__":
    sys.exit(main())
