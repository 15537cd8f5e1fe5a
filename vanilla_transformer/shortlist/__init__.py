"""Lexical shortlists: built from a training corpus into a model folder (`vanilla-transformer shortlist`)."""

import argparse

from transformers import HfArgumentParser

from ..training.arguments import DataArguments, OneLineErrors
from .write import ShortlistAfterTraining, ShortlistArguments, write_shortlist


class ShortlistParser(OneLineErrors, HfArgumentParser):
    pass


def add_shortlist_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "shortlist",
        help="build a lexical shortlist into a model folder from a training corpus (generate(use_shortlist=True), "
        "translate --shortlist)",
        add_help=False,
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: run_shortlist(args.arguments))
    return parser


def shortlist_parser() -> ShortlistParser:
    return ShortlistParser((ShortlistArguments, DataArguments), prog="vanilla-transformer shortlist")


def run_shortlist(argv: list[str]) -> int:
    args, data_args = shortlist_parser().parse_args_into_dataclasses(argv)
    done = write_shortlist(args.model, data_args, args.candidates, args.frequent, args.min_count, args.force)
    print(
        f"wrote {done['path']} ({done['bytes'] / 1e6:.1f} MB): {args.candidates} candidates a source token and the "
        f"{args.frequent} most frequent target tokens, from {done['pairs']:,} training pairs in {done['seconds']} s"
    )
    return 0


__all__ = [
    "ShortlistAfterTraining",
    "ShortlistArguments",
    "add_shortlist_subcommand",
    "run_shortlist",
    "shortlist_parser",
    "write_shortlist",
]
