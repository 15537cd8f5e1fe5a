"""Text in, tokens out: reading one-sentence-a-line text files (plain or gzipped), and a joint source+target subword
tokenizer: sentencepiece-style BPE (Metaspace words, byte fallback), saved as a plain transformers fast tokenizer that
`AutoTokenizer` loads without this package or remote code."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

# Ids 0-3 are the model config's pad/bos(decoder start)/eos defaults; the trainer assigns ids in this order.
PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
# Sentencepiece's byte-fallback pieces: a character never seen in training becomes its UTF-8 bytes, not <unk>.
BYTE_TOKENS = tuple(f"<0x{byte:02X}>" for byte in range(256))
# defaults of train_tokenizer and of `tokenizer train`
VOCAB_SIZE = 8000
MIN_FREQUENCY = 2


@contextlib.contextmanager
def open_text(path: str | os.PathLike, newline: str | None) -> Iterator[TextIO]:
    """Open a plain or gzipped UTF-8 text file, without the byte-order mark some editors write first; a file that
    is neither is a ValueError that names it."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline=newline) as file:
            yield file
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError) as error:  # these messages do not name the file
        raise ValueError(f"{path}: not a readable UTF-8 text file ({error})") from error


def iter_lines(path: str | os.PathLike, keep_ends: bool = False) -> Iterator[str]:
    """Yield the lines of a plain or gzipped UTF-8 text file without their line ending (\\n or \\r\\n; with
    `keep_ends`, as they are, for a csv reader). A line that is not UTF-8 is a ValueError naming the file and the
    line."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    # Split on "\n" only, line by line in bytes: universal newlines would also split on a stray "\r" and break the
    # line alignment, and a text file's decoder fails on a block of lines, not on the line at fault.
    try:
        with opener(path, "rb") as file:
            for number, raw in enumerate(file, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ValueError(
                        f"{path}, line {number}: not UTF-8 text (byte {raw[error.start]:#04x} at column "
                        f"{error.start + 1}): convert the file to UTF-8 (iconv -f ENCODING -t UTF-8)"
                    ) from None
                if number == 1:
                    line = line.removeprefix("\ufeff")  # the byte-order mark some editors write first
                yield line if keep_ends else line.removesuffix("\n").removesuffix("\r")
    except (gzip.BadGzipFile, EOFError) as error:  # these messages do not name the file
        raise ValueError(f"{path}: not a readable UTF-8 text file ({error})") from error


def read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a plain or gzipped UTF-8 text file, without their line endings."""
    return list(iter_lines(path))


def train_tokenizer(
    files_or_iterator: str | os.PathLike | Iterable[str | os.PathLike] | Iterable[str],
    vocab_size: int = VOCAB_SIZE,
    min_frequency: int = MIN_FREQUENCY,
    lowercase: bool = False,
    split_punctuation: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a BPE tokenizer shared by source and target language, appending `</s>` to every sequence.

    `files_or_iterator` is a text file path (plain or .gz, one sentence a line), a list of them, or any iterable of
    sentences (a list of strings, a generator, a `datasets` column). A list counts as paths when its first item is
    a `Path` or names an existing file. `vocab_size` includes the 4 special and 256 byte tokens.
    `split_punctuation` keeps punctuation out of subwords (so "forty-two" is "forty", "-", "two").
    """
    reserved = len(SPECIAL_TOKENS) + len(BYTE_TOKENS)
    if vocab_size <= reserved:
        raise ValueError(
            f"vocab_size={vocab_size} leaves no room for subwords: the vocabulary holds {len(SPECIAL_TOKENS)} special "
            f"and {len(BYTE_TOKENS)} byte tokens first, so it must be larger than {reserved}"
        )
    if isinstance(files_or_iterator, (str, os.PathLike)):
        files_or_iterator = [files_or_iterator]
    files = _training_files(files_or_iterator)
    texts = _NonBlankCount(_lines_of(files) if files else files_or_iterator)
    tokenizer = Tokenizer(models.BPE(unk_token=UNK, byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFC(), *([normalizers.Lowercase()] if lowercase else [])])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    if split_punctuation:
        # "forty-two" -> "forty", "-", "two": subwords never straddle punctuation
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([tokenizer.pre_tokenizer, pre_tokenizers.Punctuation()])
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="first")])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*SPECIAL_TOKENS, *BYTE_TOKENS],  # the trainer is the only way to put them at ids 4-259
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    if not texts.count:
        given = (
            f"{', '.join(map(str, files))} {'holds' if len(files) == 1 else 'hold'}" if files else "the sentences are"
        )
        raise ValueError(f"no text to train the tokenizer on: {given} nothing but empty or blank lines")

    # Training registers every trainer special token as an added token, which would match the literal text
    # "<0x41>" and be dropped by `skip_special_tokens`: keep the byte tokens as ordinary vocabulary entries.
    spec = json.loads(tokenizer.to_str())
    spec["added_tokens"] = [token for token in spec["added_tokens"] if token["content"] in SPECIAL_TOKENS]
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B:1 {EOS}:1", special_tokens=[(EOS, SPECIAL_TOKENS.index(EOS))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=False,  # it would glue "a ." to "a." and break exact round trips
    )


def tokenizer_identity(tokenizer: PreTrainedTokenizerBase) -> str:
    """What a given tokenizer encodes by: its whole tokenizer.json, or the vocabulary of a slow tokenizer."""
    if tokenizer.is_fast:
        described = tokenizer.backend_tokenizer.to_str().encode()
    else:
        described = json.dumps([sorted(tokenizer.get_vocab().items()), tokenizer.special_tokens_map], sort_keys=True)
        described = described.encode()
        # Marian's splits source and target text with SentencePiece models of their own
        for name in ("spm_source", "spm_target"):
            if hasattr(tokenizer, name):
                described += getattr(tokenizer, name).serialized_model_proto()
    return f"{type(tokenizer).__name__}:{hashlib.blake2b(described, digest_size=16).hexdigest()}"


def with_sentence_start(tokenizer: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """The tokenizer, made to put `<s>` before each sentence as well as `</s>` after it: the position a classifier
    reads the sentence from (BERT's [CLS]). It travels in tokenizer.json, so a pipeline encodes as training did."""
    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} $B:1 {eos}:1",
        special_tokens=[(bos, tokenizer.bos_token_id), (eos, tokenizer.eos_token_id)],
    )
    return tokenizer


def _training_files(files_or_iterator) -> list[str | os.PathLike]:
    """The files to train on, checked to exist, or [] when `files_or_iterator` holds sentences."""
    if isinstance(files_or_iterator, (list, tuple)) and files_or_iterator:
        first = files_or_iterator[0]
        if isinstance(first, os.PathLike) or os.path.isfile(first):
            missing = [str(path) for path in files_or_iterator if not os.path.isfile(path)]
            if missing:
                raise FileNotFoundError(f"tokenizer training files not found: {', '.join(missing)}")
            return list(files_or_iterator)
    return []


class _NonBlankCount:
    """Passes texts through, counting those that are not blank."""

    def __init__(self, texts: Iterable[str]):
        self.texts, self.count = texts, 0

    def __iter__(self) -> Iterator[str]:
        for text in self.texts:
            self.count += bool(text.strip())
            yield text


def _lines_of(paths: Iterable[str | os.PathLike]) -> Iterator[str]:
    for path in paths:
        yield from iter_lines(path)


def add_tokenizer_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `tokenizer train --files F [F ...] --vocab-size N --output DIR [--lowercase]`; the handler is in `func`."""
    tokenizer_parser = subparsers.add_parser("tokenizer", help="train a joint source+target subword tokenizer")
    actions = tokenizer_parser.add_subparsers(dest="tokenizer_command", required=True)
    train = actions.add_parser("train", help="train a BPE tokenizer on text files and save it")
    train.add_argument("--files", nargs="+", required=True, type=Path, help="text files, one sentence a line (.gz ok)")
    train.add_argument(
        "--vocab-size", type=int, default=VOCAB_SIZE, help="tokens of the vocabulary, 4 special and 256 byte included"
    )
    train.add_argument("--min-frequency", type=int, default=MIN_FREQUENCY, help="minimum count of a pair to be merged")
    train.add_argument("--output", type=Path, required=True, help="folder for tokenizer.json and its config")
    train.add_argument("--lowercase", action="store_true", help="lowercase all text the tokenizer encodes")
    train.add_argument("--split-punctuation", action="store_true", help="keep punctuation out of subwords")
    train.set_defaults(func=run_tokenizer_train)
    return tokenizer_parser


def run_tokenizer_train(args: argparse.Namespace) -> int:
    tokenizer = train_tokenizer(
        args.files, args.vocab_size, args.min_frequency, args.lowercase, split_punctuation=args.split_punctuation
    )
    tokenizer.save_pretrained(args.output)
    print(f"saved a tokenizer with {len(tokenizer)} tokens to {args.output}")
    return 0
