"""Translating a whole corpus with a model (`translate-corpus`): distillation's teacher data, back-translation."""

import argparse

from transformers import HfArgumentParser

from ..training.arguments import OneLineErrors
from .arguments import CorpusTranslationArguments
from .run import translate_corpus


class CorpusTranslationParser(OneLineErrors, HfArgumentParser):
    pass


def add_translate_corpus_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "translate-corpus",
        help="translate the source side of a corpus into an aligned corpus folder that train reads (distillation, "
        "back-translation); a rerun continues after the last whole chunk",
        add_help=False,
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: run_translate_corpus(args.arguments))
    return parser


def translate_corpus_parser() -> CorpusTranslationParser:
    return CorpusTranslationParser(CorpusTranslationArguments, prog="vanilla-transformer translate-corpus")


def run_translate_corpus(argv: list[str]) -> int:
    (args,) = translate_corpus_parser().parse_args_into_dataclasses(argv)
    done = translate_corpus(args)
    if done.get("already"):
        print(f"{done['folder']} is already translated (translation.json): nothing to do")
    elif done["finished"] and "sentences" in done:
        rate = f" at {done['sentences_per_second']:,} sentences/s" if done["sentences_per_second"] else ""
        splits = ", ".join(f"{name} {count:,} pairs" for name, count in done["sentences"].items())
        print(
            f"translated {done['translated_sentences']:,} sentences in {done['seconds']:,} s{rate}; wrote "
            f"{done['folder']} ({splits}), which train --dataset reads"
        )
    else:
        print(
            f"translated {done['translated_sentences']:,} sentences of this process's chunks; the process that "
            "writes the last chunk finishes the folder"
        )
    return 0


__all__ = [
    "CorpusTranslationArguments",
    "add_translate_corpus_subcommand",
    "run_translate_corpus",
    "translate_corpus",
    "translate_corpus_parser",
]
