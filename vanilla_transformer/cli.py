"""The `vanilla-transformer` command; each subcommand lives in the module that does its job and registers here."""

import argparse
import os
import sys

import yaml
from huggingface_hub.errors import StrictDataclassError

from .common.extras import MissingExtraError
from .convert import add_convert_subcommand
from .corpus_translation import add_translate_corpus_subcommand, run_translate_corpus, translate_corpus_parser
from .demo import add_demo_subcommand
from .export import add_export_subcommand
from .hub import add_push_subcommand
from .inference import add_translate_subcommand
from .serve import add_serve_subcommand, add_space_subcommand
from .serve.space import add_space_to_push
from .shortlist import ShortlistAfterTraining, add_shortlist_subcommand, run_shortlist, shortlist_parser
from .tokenization import add_tokenizer_subcommand
from .training import RunEndedWithErrors, add_prepare_subcommand, add_train_subcommand, run_prepare, run_train
from .training.arguments import OneLineErrors, argument_parser
from .training.batches import DataLoaderWorkerDied
from .training.classification import add_classify_subcommand, classify_argument_parser, run_classify
from .visualization import add_plot_subcommand
from .web import add_static_space_to_push, add_web_format


class CommandParser(OneLineErrors, argparse.ArgumentParser):
    pass


def build_parser() -> argparse.ArgumentParser:
    # the subcommands' parsers are made of the same class, so their errors are one line too
    parser = CommandParser(
        prog="vanilla-transformer",
        description="The encoder-decoder Transformer of 'Attention Is All You Need' as a Hugging Face model.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (or VANILLA_TRANSFORMER_DEBUG=1)"
    )
    subcommands = parser.add_subparsers(dest="command")
    add_demo_subcommand(subcommands)
    add_tokenizer_subcommand(subcommands)
    add_prepare_subcommand(subcommands)
    add_train_subcommand(subcommands)
    add_classify_subcommand(subcommands)
    add_translate_subcommand(subcommands)
    add_translate_corpus_subcommand(subcommands)
    add_shortlist_subcommand(subcommands)
    push = add_push_subcommand(subcommands)
    add_space_to_push(push)  # push --space: the model by hub, its Space by serve
    add_static_space_to_push(push)  # push --static-space: then the page of export web, by web
    add_serve_subcommand(subcommands)
    add_space_subcommand(subcommands)
    add_web_format(add_export_subcommand(subcommands))  # export web: the web room's, beside export's formats
    add_convert_subcommand(subcommands)
    add_plot_subcommand(subcommands)
    return parser


# The commands whose flags are dataclass fields, read by transformers' HfArgumentParser: build_parser() gives each
# only a stub that hands it the rest of the line (see `run`); these are the parsers that read them.
DATACLASS_COMMAND_PARSERS = {
    "train": lambda: argument_parser("train"),
    "prepare": lambda: argument_parser("prepare"),
    "classify": classify_argument_parser,
    "translate-corpus": translate_corpus_parser,
    "shortlist": shortlist_parser,
}


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """The parser of every command by its words: "" (`vanilla-transformer` itself), "train", "export onnx", ..., in
    the order `--help` lists them. Each is the parser that reads the command's flags, and its `description` says what
    the command does (its line in the parent's `--help` where it has no description of its own)."""
    found = {}
    _collect_parsers(build_parser(), (), None, found)
    return found


def _collect_parsers(parser: argparse.ArgumentParser, words: tuple[str, ...], summary, found: dict) -> None:
    name = " ".join(words)
    if name in DATACLASS_COMMAND_PARSERS:
        parser = DATACLASS_COMMAND_PARSERS[name]()
    parser.description = parser.description or summary
    found[name] = parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            seen = set()
            for word, subparser in action.choices.items():
                if id(subparser) not in seen:  # an alias names a parser already found
                    seen.add(id(subparser))
                    _collect_parsers(subparser, (*words, word), summaries.get(word), found)


# What a user's input can cause: bad values, files that are missing or unreadable, a broken YAML file, a config
# field out of range; an optional extra not installed; a run whose model was saved but a step after it failed (its
# cause is chained for --debug); a data loader worker killed (the out-of-memory killer), after which the run resumes
# from its last checkpoint.
# Anything else is a bug in this package and keeps its traceback.
USER_ERRORS = (
    ValueError,
    OSError,
    yaml.YAMLError,
    StrictDataclassError,
    RunEndedWithErrors,
    MissingExtraError,
    DataLoaderWorkerDied,
)
DEBUG_VARIABLE = "VANILLA_TRANSFORMER_DEBUG"


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand. A user error is one line on stderr (`vanilla-transformer CMD: error: ...`) and exit code 2;
    `--debug` (anywhere in the arguments) or VANILLA_TRANSFORMER_DEBUG=1 shows the traceback instead. Ctrl-C is
    one line and exit code 130 (training saves a checkpoint first)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    argv = [argument for argument in argv if argument != "--debug"]
    command = " ".join(["vanilla-transformer", *argv[:1]])
    try:
        return run(argv)
    except SystemExit as exit:  # argparse's way out, after --help or its one-line error: a return code here too
        if isinstance(exit.code, int) or exit.code is None:
            return exit.code or 0
        # `raise SystemExit("message")` prints its message when it ends the interpreter; here it must say it too
        print(f"{command}: error: {one_line(Exception(exit.code))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        if debug:
            raise
        said = f": {one_line(interrupt)}" if str(interrupt) else ""
        print(f"{command}: interrupted{said}", file=sys.stderr)
        return 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"{command}: error: {one_line(error)} (--debug shows the traceback)", file=sys.stderr)
        return 2


def one_line(error: BaseException) -> str:
    # a config validator's own message is the cause of the strict dataclass error that wraps it
    if isinstance(error, StrictDataclassError) and error.__cause__ is not None:
        error = error.__cause__
    return " ".join(str(error).split()) or type(error).__name__


def run(argv: list[str]) -> int:
    if argv[:1] == ["train"]:
        # HfArgumentParser owns the train flags (and --config files); argparse would mangle them here
        # the end of `train --shortlist` is the shortlist room's: the command line joins the two
        return run_train(argv[1:], after_saving=[ShortlistAfterTraining()])
    if argv[:1] == ["prepare"]:
        return run_prepare(argv[1:])
    if argv[:1] == ["classify"]:
        return run_classify(argv[1:])
    if argv[:1] == ["translate-corpus"]:
        return run_translate_corpus(argv[1:])
    if argv[:1] == ["shortlist"]:
        return run_shortlist(argv[1:])
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
