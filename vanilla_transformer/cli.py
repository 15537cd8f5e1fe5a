"""The `vanilla-transformer` command; each subcommand lives in the module that does its job and registers here."""

import argparse
import sys

from .demo import add_demo_subcommand
from .hub import add_push_subcommand
from .inference import add_translate_subcommand
from .tokenization import add_tokenizer_subcommand
from .training import add_train_subcommand, run_train
from .visualization import add_plot_subcommand


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vanilla-transformer",
        description="The encoder-decoder Transformer of 'Attention Is All You Need' as a Hugging Face model.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subcommands = parser.add_subparsers(dest="command")
    add_demo_subcommand(subcommands)
    add_tokenizer_subcommand(subcommands)
    add_train_subcommand(subcommands)
    add_translate_subcommand(subcommands)
    add_push_subcommand(subcommands)
    add_plot_subcommand(subcommands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        # HfArgumentParser owns the train flags (and --config files); argparse would mangle them here
        return run_train(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from . import __version__

        print(__version__)
        return 0
    if not hasattr(args, "func"):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
