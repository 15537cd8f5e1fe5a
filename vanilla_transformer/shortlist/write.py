"""A model folder's shortlist, written: the corpus prepared with the model's tokenizer (as `train` prepares it, and
from the same cache), the shortlist built from its training split, and the file written whole into the folder."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..common.languages import check_languages
from ..common.model_folder import load_config, load_tokenizer
from ..lexical_shortlist import CANDIDATES, FREQUENT, MIN_COUNT, SHORTLIST_FILE, LexicalShortlist
from ..tokenization import tokenizer_identity
from ..training.arguments import DataArguments, check_at_least
from ..training.corpus import is_prepared, load_prepared, prepare_corpus


@dataclass
class ShortlistArguments:
    model: str = field(metadata={"help": "the model folder to write shortlist.safetensors into (its tokenizer's ids)"})
    candidates: int = field(default=CANDIDATES, metadata={"help": "K: candidate target tokens of each source token"})
    frequent: int = field(default=FREQUENT, metadata={"help": "N: the most frequent target tokens, always allowed"})
    min_count: int = field(
        default=MIN_COUNT, metadata={"help": "a candidate co-occurs with its source token in this many pairs at least"}
    )
    force: bool = field(default=False, metadata={"help": "replace the shortlist the folder holds"})

    def __post_init__(self):
        check_at_least(self, 1, "candidates", "min_count")
        check_at_least(self, 0, "frequent")


def check_sizes(candidates: int, frequent: int, target_vocab_size: int) -> None:
    """K and N name target tokens: neither can exceed the target vocabulary."""
    for name, value in (("candidates", candidates), ("frequent", frequent)):
        if value > target_vocab_size:
            raise ValueError(
                f"{name}={value} is more than the model's {target_vocab_size:,} target tokens: give 1 to "
                f"{target_vocab_size:,}"
            )


def write_shortlist(
    model: str | os.PathLike,
    data_args: DataArguments,
    candidates: int = CANDIDATES,
    frequent: int = FREQUENT,
    min_count: int = MIN_COUNT,
    force: bool = False,
    corpus=None,
) -> dict:
    """Build the shortlist of `data_args`' training split for the model folder `model` and write it there. `corpus`:
    the prepared corpus when the caller has it (the end of a training run)."""
    folder = Path(model)
    if not folder.is_dir():
        raise NotADirectoryError(
            f"{model} is not a local model folder: the shortlist is written into the folder (download a Hub model "
            "first, e.g. with `hf download`)"
        )
    config = load_config(folder)
    target_vocab_size = getattr(config, "target_vocab_size", config.vocab_size)
    check_sizes(candidates, frequent, target_vocab_size)
    path = folder / SHORTLIST_FILE
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists: pass --force to build it anew")
    tokenizer = load_tokenizer(folder, described_as="model")
    # the model's languages before the corpus is prepared: a shortlist of the other direction would map the wrong ids
    swapped = f"pass --source_lang {data_args.target_lang} --target_lang {data_args.source_lang}"
    check_languages(str(folder), tokenizer, data_args.source_lang, data_args.target_lang, swapped)
    if corpus is None:
        if is_prepared(data_args.dataset):
            given = load_prepared(Path(data_args.dataset), data_args).tokenizer
            if tokenizer_identity(given) != tokenizer_identity(tokenizer):
                raise ValueError(
                    f"{data_args.dataset} was prepared with tokenizer {tokenizer_identity(given)}, and the model "
                    f"{folder} has tokenizer {tokenizer_identity(tokenizer)}: the shortlist's ids must be the model's; "
                    "pass the data files, which are prepared with the model's tokenizer"
                )
        corpus = prepare_corpus(data_args, tokenizer)
    if corpus.train is None or corpus.train.num_rows == 0:
        raise ValueError(f"{data_args.dataset} has no training pairs to build a shortlist from")
    from .build import build_shortlist  # scipy is loaded when a shortlist is built, not with the command line

    started = time.perf_counter()
    special = [*tokenizer.all_special_ids, config.decoder_start_token_id, config.pad_token_id, config.eos_token_id]
    shortlist: LexicalShortlist = build_shortlist(
        corpus.train,
        config.vocab_size,
        target_vocab_size,
        special,
        candidates,
        frequent,
        min_count,
        metadata={"tokenizer": tokenizer_identity(tokenizer), "corpus": str(data_args.dataset)},
    )
    seconds = round(time.perf_counter() - started, 1)
    partial = folder / f".{SHORTLIST_FILE}.partial"  # written whole, then renamed into place
    shortlist.save(partial)
    os.replace(partial, path)
    return {"path": path, "bytes": path.stat().st_size, "pairs": corpus.train.num_rows, "seconds": seconds}


class ShortlistAfterTraining:
    """`train --shortlist`: the shortlist of the run's corpus, written into its output folder once the model is saved
    (a `training.AfterSaving` step, which the command line joins to `train`)."""

    def describe(self, run) -> str:
        retry = f"`vanilla-transformer shortlist --model {run.output_dir} --dataset ...` retries"
        return f"building the lexical shortlist ({retry})"

    def __call__(self, run) -> dict:
        if not run.args.shortlist:
            return {}
        written = write_shortlist(
            run.output_dir,
            run.data_args,
            run.args.shortlist_candidates,
            run.args.shortlist_frequent,
            force=True,
            corpus=run.corpus,
        )
        return {"shortlist": {"seconds": written["seconds"], "bytes": written["bytes"]}}
