"""`vanilla-transformer demo`: the main job of the README, offline and on a CPU in under 3 minutes.

It writes numbers as English words and as German words ("forty-two" -> "zweiundvierzig": the units move in front
and everything fuses into one word), trains a tokenizer and a small Transformer on those pairs, then reports
exact-match accuracy on numbers it never saw and saves a Hub-ready folder.
"""

import argparse
import tempfile
import time
from pathlib import Path

from ..inference import translate
from ..tokenization import train_tokenizer
from ..training import DataArguments, ModelArguments, TrainArguments, TrainingRun
from .number_words import demo_splits, write_parallel_folder


def demo_arguments(corpus: Path, output_dir: Path, minutes: float, seed: int, overwrite: bool = False):
    model_args = ModelArguments(
        d_model=128,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=512,
        decoder_ffn_dim=512,
        dropout=0.0,
        label_smoothing=0.0,
    )
    data_args = DataArguments(
        dataset=str(corpus),
        validation_split="validation",
        test_split=None,
        tokenizer=str(corpus / "tokenizer"),
        max_eval_samples=200,
    )
    train_args = TrainArguments(
        output_dir=str(output_dir),
        seed=seed,
        max_steps=100_000,
        max_train_minutes=minutes,
        max_tokens=2048,
        learning_rate=2e-3,
        warmup_steps=200,
        logging_steps=25,
        eval_steps=0,
        save_steps=0,
        num_beams=1,
        max_new_tokens=40,
        eval_batch_size=250,
        report_to="none",
        overwrite_output_dir=overwrite,
    )
    return model_args, data_args, train_args


# the command's defaults too
MINUTES = 2.0
TRAIN_SIZE = 20_000


def run_demo(
    output_dir: Path,
    minutes: float = MINUTES,
    train_size: int = TRAIN_SIZE,
    test_size: int = 500,
    max_value: int = 999_999,
    seed: int = 0,
    examples: int = 8,
    overwrite: bool = False,
) -> dict:
    """Train and score the demo into `output_dir`, which must be empty or missing unless `overwrite`."""
    if not overwrite and output_dir.is_dir() and any(output_dir.iterdir()):
        raise ValueError(
            f"{output_dir} is not empty: pass --overwrite to replace the demo there, or another --output-dir"
        )
    started = time.time()
    splits = demo_splits(train_size=train_size, test_size=test_size, seed=seed, max_value=max_value)
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch)
        write_parallel_folder(corpus, splits)
        sentences = [text for english, german in splits["train"] for text in (english, german)]
        train_tokenizer(sentences, vocab_size=600, min_frequency=2, split_punctuation=True).save_pretrained(
            corpus / "tokenizer"
        )
        trainer = TrainingRun(*demo_arguments(corpus, output_dir, minutes, seed, overwrite))
        results = trainer.run()

    model, tokenizer = trainer.unwrapped.eval(), trainer.tokenizer
    sources = [english for english, _ in splits["test"]]
    references = [german for _, german in splits["test"]]
    translations = translate(model, tokenizer, sources, num_beams=1, batch_size=250)
    correct = sum(hypothesis == reference for hypothesis, reference in zip(translations, references, strict=True))
    accuracy = correct / len(references)
    print(f"\nheld-out numbers translated exactly: {correct}/{len(references)} = {accuracy:.1%}")
    for source, hypothesis, reference in list(zip(sources, translations, references, strict=True))[:examples]:
        mark = "ok" if hypothesis == reference else f"expected {reference}"
        print(f"  {source:<55} -> {hypothesis}  [{mark}]")
    print(f"saved to {output_dir} after {time.time() - started:.0f} s; try:")
    print(f'  echo "forty-two" | vanilla-transformer translate --model {output_dir}')
    return {**results, "held_out_accuracy": accuracy, "held_out_examples": len(references)}


def add_demo_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("demo", help="train a small English->German number translator offline (~3 min)")
    parser.add_argument(
        "--output-dir", type=Path, default=Path("outputs/demo"), help="where the model goes (empty, or --overwrite)"
    )
    parser.add_argument("--minutes", type=float, default=MINUTES, help="training time")
    parser.add_argument("--train-size", type=int, default=TRAIN_SIZE, help="training pairs of the numbers corpus")
    parser.add_argument("--seed", type=int, default=0, help="seeds the corpus drawn and the training run")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier demo in --output-dir")
    parser.set_defaults(
        func=lambda args: (
            run_demo(args.output_dir, args.minutes, args.train_size, seed=args.seed, overwrite=args.overwrite) and 0
        )
    )
    return parser
