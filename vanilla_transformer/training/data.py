"""Parallel corpora: loading aligned sentence pairs, length filtering, token-budget batching and padding."""

from __future__ import annotations

import csv
import json
import numbers
import os
import random
import re
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
import pyarrow.compute as pc
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerBase

from ..hub.connection import HubUnreachableError, load_dataset_or_cache
from ..hub.push import HUB_ID
from ..tokenization import open_text, read_lines

# `{split}.{lang}[.gz]`, e.g. train.de.gz or test_2016_flickr.en; a language code is like "de", "pt_br", "zh-Hans".
_TEXT_FILE = re.compile(r"(?P<split>.+?)\.(?P<lang>[a-z]{2,3}(?:[_-][A-Za-z]{2,4})?)(?:\.gz)?")
# Two- and three-letter suffixes of files that also live in data folders and are not languages.
_NOT_LANGUAGES = {"md", "txt", "rst", "py", "sh", "csv", "tsv", "yml", "cfg", "ini", "log", "tar", "zip", "bz2", "xz"}
_TABLE_FILE = re.compile(r"(?P<split>.+)\.(?P<format>jsonl|csv)(?:\.gz)?")
_LOCAL_SUFFIXES = {".gz", ".jsonl", ".json", ".csv", ".tsv", ".txt"}


def load_parallel(
    source: str | os.PathLike, src_lang: str, tgt_lang: str, split: str = "train", *, name: str | None = None
) -> datasets.Dataset:
    """Load the sentence pairs of one split as a `Dataset` with the columns `src_lang` and `tgt_lang`.

    `source` is one of:
    - a folder of line-aligned text files `{split}.{lang}` or `{split}.{lang}.gz` (e.g. train.en.gz, train.de.gz);
    - a folder holding `{split}.jsonl` or `{split}.csv` (optionally gzipped), or such a file itself (then `split`
      is not used), with one column per language or a `translation` column of `{lang: text}` dicts;
    - a Hugging Face Hub dataset id such as "bentrevett/multi30k" (`name` picks its configuration, e.g. "de-en"
      for wmt14).
    Only reads: the local formats are built in memory and write no cache.
    """
    if src_lang == tgt_lang:
        raise ValueError(f"source and target language are both {src_lang!r}")
    languages = (src_lang, tgt_lang)
    path = Path(source)
    if path.is_dir():
        return _load_folder(path, languages, split)
    if path.is_file():
        return _load_table(path, languages)
    # A Hub id is "name" or "owner/name"; anything else that names no existing path is a missing local one.
    if isinstance(source, os.PathLike) or path.suffix in _LOCAL_SUFFIXES or not HUB_ID.fullmatch(str(source)):
        raise FileNotFoundError(f"{source}: no such file or folder")
    return _load_hub(str(source), languages, split, name)


def _load_folder(folder: Path, languages: tuple[str, str], split: str) -> datasets.Dataset:
    text_files: dict[str, dict[str, Path]] = {}  # split -> language -> file
    table_files: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        if match := _TABLE_FILE.fullmatch(path.name):
            table_files.setdefault(match["split"], path)
        elif (match := _TEXT_FILE.fullmatch(path.name)) and match["lang"] not in _NOT_LANGUAGES:
            text_files.setdefault(match["split"], {})[match["lang"]] = path
    if split in text_files:
        files = text_files[split]
        for lang in languages:
            if lang in files:
                continue
            expected, available = folder / f"{split}.{lang}", ", ".join(sorted(files))
            if any(lang in other for other in text_files.values()):
                raise FileNotFoundError(f"missing file {expected} (or .gz): split {split!r} has only {available}")
            raise ValueError(f"unknown language {lang!r}: no {expected} (or .gz); available languages: {available}")
        return _load_aligned_files(files[languages[0]], files[languages[1]], languages)
    if split in table_files:
        return _load_table(table_files[split], languages)
    available = ", ".join(sorted(text_files.keys() | table_files.keys())) or "none"
    raise ValueError(f"unknown split {split!r} in {folder}: available splits: {available}")


def _load_aligned_files(src_path: Path, tgt_path: Path, languages: tuple[str, str]) -> datasets.Dataset:
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    for path, lines in ((src_path, src_lines), (tgt_path, tgt_lines)):
        if not lines:
            raise ValueError(f"{path}: empty file")
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}: "
            "parallel files must be aligned line by line"
        )
    aligned = list(zip(src_lines, tgt_lines, strict=True))
    blank = [number for number, (src, tgt) in enumerate(aligned, 1) if not (src.strip() and tgt.strip())]
    if len(blank) == len(aligned):
        raise ValueError(f"{src_path} and {tgt_path} hold no pair of non-blank lines")
    if blank:
        listed = ", ".join(map(str, blank[:5])) + (" ..." if len(blank) > 5 else "")
        warnings.warn(
            f"{src_path}, {tgt_path}: {len(blank)} line pair(s) with a blank side left out (lines {listed})",
            stacklevel=3,
        )
    left_out = set(blank)
    pairs = [pair for number, pair in enumerate(aligned, 1) if number not in left_out]
    return datasets.Dataset.from_dict(dict(zip(languages, zip(*pairs, strict=True), strict=True)))


def read_records(path: Path, file_format: str) -> Iterator[dict]:
    """The records of a jsonl file, or of a csv or tsv file with a header line (a tsv has no quoting: quotes are
    text, as in GLUE's files), one dict each."""
    with open_text(path, newline="") as lines:
        if file_format in ("csv", "tsv"):
            tabs = dict(delimiter="\t", quoting=csv.QUOTE_NONE) if file_format == "tsv" else {}
            reader = csv.DictReader(lines, **tabs)
            for record in reader:
                if None in record:  # DictReader files the values past the header's columns under None
                    separator = "tab" if file_format == "tsv" else "comma inside an unquoted text? quote it"
                    raise ValueError(
                        f"{path}, line {reader.line_num}: more values than the header has columns (a {separator})"
                    )
                yield record
            return
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: invalid JSON ({error})") from error


def _load_table(path: Path, languages: tuple[str, str]) -> datasets.Dataset:
    if not (match := _TABLE_FILE.fullmatch(path.name)):
        raise ValueError(f"{path}: expected a .jsonl or .csv file (optionally .gz), or a folder")
    columns: dict[str, list[str]] = {lang: [] for lang in languages}
    for number, record in enumerate(read_records(path, match["format"]), 1):
        if not isinstance(record, dict):
            raise TypeError(f"{path}, record {number}: expected an object with one field per language")
        if isinstance(record.get("translation"), dict):  # the wmt layout: {"translation": {"de": ..., "en": ...}}
            record = {**record, **record["translation"]}
        for lang in languages:
            text = record.get(lang)
            if isinstance(text, str):
                columns[lang].append(text)
            elif number == 1 and lang not in record:
                raise ValueError(f"unknown language {lang!r} in {path}: available columns: {', '.join(record)}")
            else:
                raise ValueError(f"{path}, record {number}: {lang!r} is {text!r}, not a text")
    if not columns[languages[0]]:
        raise ValueError(f"{path}: empty file")
    return datasets.Dataset.from_dict(columns)


def _load_hub(dataset_id: str, languages: tuple[str, str], split: str, name: str | None) -> datasets.Dataset:
    try:
        # An unknown split raises datasets' own ValueError, which lists the available splits.
        dataset = load_dataset_or_cache(dataset_id, name, split=split)
    except HubUnreachableError:
        raise
    except OSError as error:  # DatasetNotFoundError and connection errors are OSErrors
        raise FileNotFoundError(
            f"{dataset_id}: not a local file or folder, and loading it from the Hub failed: {error}"
        ) from error
    if "translation" in dataset.column_names:
        # flatten() and rename_columns() work on the Arrow table in memory: no cache file is written.
        dataset = dataset.flatten()
        nested = [column for column in dataset.column_names if column.startswith("translation.")]
        dataset = dataset.rename_columns({column: column.removeprefix("translation.") for column in nested})
    for lang in languages:
        if lang not in dataset.column_names:
            available = ", ".join(dataset.column_names)
            raise ValueError(f"unknown language {lang!r} in {dataset_id} ({split}): available columns: {available}")
    return dataset.select_columns(list(languages))


def sequence_lengths(dataset: datasets.Dataset) -> list[tuple[int, int]]:
    """The (source, target) token counts of each example, computed in Arrow without loading the ids into Python."""
    table = dataset.with_format("arrow")
    per_column = [pc.list_value_length(table[column]).to_pylist() for column in ("input_ids", "labels")]
    return list(zip(*per_column, strict=True))


def filter_by_length(dataset: datasets.Dataset, max_len: int, min_len: int = 1) -> datasets.Dataset:
    """Keep the examples of a tokenized `Dataset` whose source and target both have `min_len` to `max_len` tokens."""
    keep = [
        index
        for index, lengths in enumerate(sequence_lengths(dataset))
        if all(min_len <= length <= max_len for length in lengths)
    ]
    return dataset.select(keep)  # an index mapping, no copy and no cache file


def token_budget_batches(
    lengths: Sequence[int] | Sequence[Sequence[int]], max_tokens: int, shuffle_seed: int | None = None
) -> list[list[int]]:
    """Group example indices into batches of similar length whose padded size stays within `max_tokens`.

    `lengths` holds one length per example, or one (source, target) pair of lengths, of which the longer counts.
    As in fairseq, indices are sorted by length and batched greedily so that `len(batch) * longest <= max_tokens`;
    an example longer than `max_tokens` becomes a batch of its own. With `shuffle_seed`, ties in length are broken
    at random and the order of the batches is shuffled, both reproducibly. Every index appears in exactly one batch.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    sizes = [int(length) if isinstance(length, numbers.Integral) else max(length) for length in lengths]
    order = list(range(len(sizes)))
    rng = random.Random(shuffle_seed)
    if shuffle_seed is not None:
        rng.shuffle(order)
    order.sort(key=sizes.__getitem__)  # stable: equal lengths keep the shuffled order

    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for index in order:
        longest_with_index = max(longest, sizes[index])
        if batch and (len(batch) + 1) * longest_with_index > max_tokens:
            batches.append(batch)
            batch, longest_with_index = [], sizes[index]
        batch.append(index)
        longest = longest_with_index
    if batch:
        batches.append(batch)
    if shuffle_seed is not None:
        rng.shuffle(batches)
    return batches


def seq2seq_collator(tokenizer: PreTrainedTokenizerBase, model=None) -> DataCollatorForSeq2Seq:
    """Pad tokenized examples into tensors: input_ids with the pad id (0), attention_mask, labels with -100.

    Given the model, the collator also builds `decoder_input_ids` from the labels.
    """
    return DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")
