"""Multi30k EN->DE: train with a config (or evaluate an existing folder) and print the test scores.

    python -m benchmarks.multi30k --config configs/multi30k_en_de.yaml          # train, then score
    python -m benchmarks.multi30k --evaluate outputs/multi30k_en_de             # score a trained folder
    python -m benchmarks.multi30k --evaluate outputs/multi30k_en_de --quantize int8   # ... with int8 linear layers

The languages are the config's source_lang and target_lang (the training defaults, en and de, where it sets none),
whether training or only scoring a folder; training flags given here (e.g. --seed 2) override the config.
Scores on the test split: sacreBLEU (cased, detokenized, 13a), BLEU4 on lowercased 13a-tokenized text (the figure
published Multi30k results report) and chrF, with the beam size, wall time, the updates the run made and its training
tokens/s (over the steps alone, from results.json), and the machine. `--torch_compile` compiles the training step.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from .common import machine_summary

REPO = Path(__file__).resolve().parents[1]


def training_arguments(config: str, data: str, overrides: list[str]) -> tuple:
    """ModelArguments, DataArguments and TrainArguments of the recipe: the config file, the --data folder as the
    dataset, then `overrides` (training flags); the dataclasses' defaults where none of them sets a field."""
    from vanilla_transformer.training import parse_arguments

    return parse_arguments(["--config", config, "--dataset", data, *overrides])


def evaluate_folder(
    folder: Path,
    data: str,
    source_lang: str,
    target_lang: str,
    split: str,
    num_beams: int,
    batch_size: int,
    quantize: str | None = None,
) -> dict:
    from vanilla_transformer.inference.translate import load_for_translation, translate
    from vanilla_transformer.training.corpus import load_parallel
    from vanilla_transformer.training.evaluation import corpus_scores

    model, tokenizer = load_for_translation(str(folder), quantize=quantize)
    test = load_parallel(data, source_lang, target_lang, split)
    started = time.time()
    hypotheses = translate(model, tokenizer, list(test[source_lang]), num_beams=num_beams, batch_size=batch_size)
    return {
        "split": split,
        "sentences": len(hypotheses),
        "num_beams": num_beams,
        "quantize": quantize,
        "translate_seconds": round(time.time() - started, 1),
        **{name: round(value, 2) for name, value in corpus_scores(hypotheses, list(test[target_lang])).items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs" / "multi30k_en_de.yaml"))
    parser.add_argument("--evaluate", type=Path, help="score this trained folder instead of training")
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--num-beams", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--quantize", choices=("int8",), help="score with int8 linear layers (translate --quantize)")
    args, train_overrides = parser.parse_known_args(argv)

    started = time.time()
    model_args, data_args, train_args = training_arguments(args.config, args.data, train_overrides)
    folder = args.evaluate
    if folder is None:
        from vanilla_transformer.training import train

        results = train(model_args, data_args, train_args)
        folder = Path(train_args.output_dir)
        print(json.dumps(results, indent=2))
    else:  # the training figures of a trained folder, where it has them
        results_file = folder / "results.json"
        results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    scores = evaluate_folder(
        folder,
        args.data,
        data_args.source_lang,
        data_args.target_lang,
        args.split,
        args.num_beams,
        args.batch_size,
        args.quantize,
    )
    scores.update(folder=str(folder), wall_seconds=round(time.time() - started, 1), machine=machine_summary())
    # the updates the hour held and the training speed (over the steps alone), where the run recorded them
    scores.update(
        updates=results.get("train_steps"),
        train_tokens_per_second=results.get("train_tokens_per_second"),
        torch_compile=train_args.torch_compile,
    )
    print(json.dumps(scores, indent=2))
    updates = f"{scores['updates']:,}" if scores["updates"] is not None else "-"
    speed = f"{scores['train_tokens_per_second']:,.0f}" if scores["train_tokens_per_second"] is not None else "-"
    print(
        f"| {scores['split']} | {scores['bleu_lowercased']:.1f} | {scores['bleu']:.1f} | {scores['chrf']:.1f} | "
        f"{scores['num_beams']} | {scores['wall_seconds'] / 60:.0f} min | {updates} | {speed} | {scores['machine']} |"
    )


if __name__ == "__main__":
    sys.exit(main())
