"""Training: `vanilla-transformer train` (arguments, corpus, loop, checkpoints, evaluation)."""

import argparse

from .arguments import DataArguments, ModelArguments, TrainArguments, parse_arguments
from .loop import RunEndedWithErrors, TrainingInterrupted, TrainingRun, train


def add_train_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a model (arguments: --config FILE and/or any ModelArguments/DataArguments/TrainArguments flag)",
        add_help=False,
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: run_train(args.arguments))
    return parser


def run_train(argv: list[str]) -> int:
    results = train(*parse_arguments(argv))
    if "test" in results or "validation" in results:
        print({k: v for k, v in results.items() if k in ("validation", "test", "train_seconds", "train_steps")})
    return 0


__all__ = [
    "DataArguments",
    "ModelArguments",
    "RunEndedWithErrors",
    "TrainArguments",
    "TrainingInterrupted",
    "TrainingRun",
    "add_train_subcommand",
    "parse_arguments",
    "train",
]
