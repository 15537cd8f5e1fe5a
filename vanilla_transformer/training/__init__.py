"""Training: `vanilla-transformer train` (arguments, corpus, loop, checkpoints, evaluation)."""

import argparse
from collections.abc import Sequence

from .arguments import DataArguments, ModelArguments, TrainArguments, parse_arguments
from .corpus import prepare_corpus
from .loop import AfterSaving, RunEndedWithErrors, TrainingInterrupted, TrainingRun, train
from .starting_model import StartingModel


def add_train_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a model (arguments: --config FILE and/or any ModelArguments/DataArguments/TrainArguments flag)",
        add_help=False,
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: run_train(args.arguments))
    return parser


def add_prepare_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "prepare",
        help="prepare a corpus once (read, train the tokenizer, tokenize, cache) for later train runs: train's flags",
        add_help=False,
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: run_prepare(args.arguments))
    return parser


def run_prepare(argv: list[str]) -> int:
    """What `train` does with its data flags before training, alone: a cluster's CPU job prepares, then the GPU jobs
    given the same flags (or --dataset FOLDER) map the folder."""
    model_args, data_args, _ = parse_arguments(argv, command="prepare")
    # a corpus to fine-tune on is encoded with the model's tokenizer
    start = StartingModel.find(model_args.from_model) if model_args.from_model else None
    corpus = prepare_corpus(data_args, start.tokenizer(also_named=data_args.tokenizer) if start else None)
    splits = ", ".join(
        f"{name} {dataset.num_rows:,} pairs"
        for name, dataset in (("train", corpus.train), ("validation", corpus.validation), ("test", corpus.test))
        if dataset is not None
    )
    print(f"prepared {corpus.folder} ({splits}; a tokenizer of {len(corpus.tokenizer):,} tokens)")
    return 0


def run_train(argv: list[str], after_saving: Sequence[AfterSaving] = ()) -> int:
    """`train` with its flags; `after_saving`: the other rooms' steps that the command line joins to it."""
    results = train(*parse_arguments(argv), after_saving=after_saving)
    if "test" in results or "validation" in results:
        print({k: v for k, v in results.items() if k in ("validation", "test", "train_seconds", "train_steps")})
    return 0


__all__ = [
    "AfterSaving",
    "DataArguments",
    "ModelArguments",
    "RunEndedWithErrors",
    "TrainArguments",
    "TrainingInterrupted",
    "TrainingRun",
    "add_prepare_subcommand",
    "add_train_subcommand",
    "parse_arguments",
    "prepare_corpus",
    "run_prepare",
    "train",
]
