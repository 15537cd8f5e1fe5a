"""From data files to a prepared corpus, in the order the data flows:

1. read the sentence pairs of each split, streamed into Arrow (a folder of aligned text files, jsonl/csv files, or a
   Hub dataset);
2. get the tokenizer: the one given, or one trained on a sample of the training pairs;
3. tokenize, leaving out training pairs longer than the length limits;
4. keep the result, with its tokenizer, in a cache folder named by a fingerprint of the data and of every setting
   above. Later runs, resumed runs and every process of a multi-process run memory-map it instead of preparing the
   corpus again, and a changed file or setting has another fingerprint, so a stale corpus is never read.

`vanilla-transformer prepare` runs these steps alone; `--dataset` then also takes the prepared folder itself.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from itertools import zip_longest
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from ..common.hub_connection import HubUnreachableError, load_dataset_or_cache
from ..common.model_folder import HUB_ID, load_tokenizer
from ..tokenization import MIN_FREQUENCY, iter_lines, tokenizer_identity, train_tokenizer
from .arguments import DataArguments
from .prepared_folder import (
    DamagedCorpusError,
    check_file_sizes,
    file_sizes,
    preparing,
    remove_abandoned,
    remove_damaged,
)

# ------------------------------------------------------------------------------------------------- 1. reading text

# `{split}.{lang}[.gz]`, e.g. train.de.gz or test_2016_flickr.en; a language code is like "de", "pt_br", "zh-Hans".
_TEXT_FILE = re.compile(r"(?P<split>.+?)\.(?P<lang>[a-z]{2,3}(?:[_-][A-Za-z]{2,4})?)(?:\.gz)?")
# Two- and three-letter suffixes of files that also live in data folders and are not languages.
_NOT_LANGUAGES = {"md", "txt", "rst", "py", "sh", "csv", "tsv", "yml", "cfg", "ini", "log", "tar", "zip", "bz2", "xz"}
_TABLE_FILE = re.compile(r"(?P<split>.+)\.(?P<format>jsonl|csv)(?:\.gz)?")
_LOCAL_SUFFIXES = {".gz", ".jsonl", ".json", ".csv", ".tsv", ".txt"}
# sentence pairs an Arrow record batch holds while a split is streamed to disk
_CHUNK = 100_000


@dataclasses.dataclass(frozen=True)
class SplitSource:
    """Where one split's pairs come from: two aligned text files, one jsonl/csv table, or a Hub dataset."""

    languages: tuple[str, str]
    files: tuple[Path, ...] = ()
    hub_id: str | None = None
    hub_config: str | None = None
    split: str = "train"

    def records(self) -> Iterator[pa.RecordBatch]:
        """The pairs as Arrow record batches of the two language columns, read a chunk at a time."""
        if len(self.files) == 2:
            return _aligned_batches(*self.files, self.languages)
        return _table_batches(self.files[0], self.languages)

    def identity(self, file_digests: FileDigests) -> str:
        """What the split's content is known by: the bytes of its files, or the Hub dataset's fingerprint."""
        if self.hub_id is not None:
            return f"hub:{self.hub_id}:{self.hub_config}:{self.split}:{self.load_hub()._fingerprint}"
        return "files:" + ",".join(f"{path.name}={file_digests(path)}" for path in self.files)

    def load_hub(self) -> datasets.Dataset:
        return _load_hub(self.hub_id, self.languages, self.split, self.hub_config)


class FileDigests:
    """The digest of each data file's bytes, remembered in the corpus cache beside the file's size, modification time
    and inode: a second run, a resume and every process of a run know a corpus by its content without reading it
    again (WMT14's 1.2 GB of text takes 15 s to read from a cold disk), and a file that changes is read anew."""

    def __init__(self, cache: Path):
        self.path = cache / FILE_DIGESTS
        try:
            self.known = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, or unreadable: each file is read once more
            self.known = {}

    def __call__(self, path: Path) -> str:
        stat = path.stat()
        key, stamp = str(path.resolve()), [stat.st_size, stat.st_mtime_ns, stat.st_ino]
        known = self.known.get(key)
        if isinstance(known, dict) and known.get("stamp") == stamp:
            return known["digest"]
        digest = hashlib.blake2b(digest_size=16)
        with path.open("rb") as file:
            while block := file.read(1 << 22):
                digest.update(block)
        self.known[key] = {"stamp": stamp, "digest": digest.hexdigest()}
        self._save()
        return digest.hexdigest()

    def _save(self) -> None:
        # whole or not at all (several processes may write it); a cache that cannot be written costs a read, no more
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(self.known, indent=0), encoding="utf-8")
            os.replace(partial, self.path)


def split_source(
    source: str | os.PathLike, src_lang: str, tgt_lang: str, split: str = "train", *, name: str | None = None
) -> SplitSource:
    """Find one split's data without reading it, so that a missing file, split or language is named at once.

    `source` is one of:
    - a folder of line-aligned text files `{split}.{lang}` or `{split}.{lang}.gz` (e.g. train.en.gz, train.de.gz);
    - a folder holding `{split}.jsonl` or `{split}.csv` (optionally gzipped), or such a file itself (then `split`
      is not used), with one column per language or a `translation` column of `{lang: text}` dicts;
    - a Hugging Face Hub dataset id such as "bentrevett/multi30k" (`name` picks its configuration, e.g. "de-en"
      for wmt14).
    """
    if src_lang == tgt_lang:
        raise ValueError(f"source and target language are both {src_lang!r}")
    languages = (src_lang, tgt_lang)
    path = Path(source)
    if path.is_dir():
        return _folder_split(path, languages, split)
    if path.is_file():
        if not _TABLE_FILE.fullmatch(path.name):
            raise ValueError(f"{path}: expected a .jsonl or .csv file (optionally .gz), or a folder")
        return SplitSource(languages, files=(path,))
    # A Hub id is "name" or "owner/name"; anything else that names no existing path is a missing local one.
    if isinstance(source, os.PathLike) or path.suffix in _LOCAL_SUFFIXES or not HUB_ID.fullmatch(str(source)):
        raise FileNotFoundError(f"{source}: no such file or folder")
    return SplitSource(languages, hub_id=str(source), hub_config=name, split=split)


def load_parallel(
    source: str | os.PathLike,
    src_lang: str,
    tgt_lang: str,
    split: str = "train",
    *,
    name: str | None = None,
    into: Path | None = None,
) -> datasets.Dataset:
    """Load the sentence pairs of one split (see `split_source`) as a `Dataset` with the columns `src_lang` and
    `tgt_lang`. Local files are streamed into the Arrow file `into`, which the Dataset then memory-maps, or, without
    `into`, into memory; a Hub dataset is datasets' own memory-mapped cache. Nothing else is written."""
    return read_split(split_source(source, src_lang, tgt_lang, split, name=name), into)


def _folder_split(folder: Path, languages: tuple[str, str], split: str) -> SplitSource:
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
        return SplitSource(languages, files=tuple(files[lang] for lang in languages))
    if split in table_files:
        return SplitSource(languages, files=(table_files[split],))
    available = ", ".join(sorted(text_files.keys() | table_files.keys())) or "none"
    raise ValueError(f"unknown split {split!r} in {folder}: available splits: {available}")


def _aligned_batches(src_path: Path, tgt_path: Path, languages: tuple[str, str]) -> Iterator[pa.RecordBatch]:
    """The pairs of two line-aligned files, checked as they stream past: files of unequal length, an empty file and
    files without a non-blank pair are errors; pairs with a blank side are left out with a warning."""
    lines = {src_path: 0, tgt_path: 0}
    blank, kept = [], 0
    chunk: tuple[list[str], list[str]] = ([], [])
    for number, (src, tgt) in enumerate(zip_longest(iter_lines(src_path), iter_lines(tgt_path)), 1):
        if src is None or tgt is None:  # one file ended: count the rest of the other for the message
            lines[src_path], lines[tgt_path] = number - 1, number - 1
            longer = tgt_path if src is None else src_path
            lines[longer] = number + sum(1 for _ in zip_longest(iter_lines(longer), [])) - number
            break
        lines[src_path] = lines[tgt_path] = number
        if not (src.strip() and tgt.strip()):
            blank.append(number)
            continue
        chunk[0].append(src)
        chunk[1].append(tgt)
        if len(chunk[0]) == _CHUNK:
            kept += _CHUNK
            yield pa.RecordBatch.from_arrays([pa.array(chunk[0]), pa.array(chunk[1])], names=list(languages))
            chunk = ([], [])
    for path in (src_path, tgt_path):
        if not lines[path]:
            raise ValueError(f"{path}: empty file")
    if lines[src_path] != lines[tgt_path]:
        raise ValueError(
            f"{src_path} has {lines[src_path]} lines but {tgt_path} has {lines[tgt_path]}: "
            "parallel files must be aligned line by line"
        )
    if not kept + len(chunk[0]):
        raise ValueError(f"{src_path} and {tgt_path} hold no pair of non-blank lines")
    if blank:
        listed = ", ".join(map(str, blank[:5])) + (" ..." if len(blank) > 5 else "")
        warnings.warn(
            f"{src_path}, {tgt_path}: {len(blank)} line pair(s) with a blank side left out (lines {listed})",
            stacklevel=2,
        )
    if chunk[0]:
        yield pa.RecordBatch.from_arrays([pa.array(chunk[0]), pa.array(chunk[1])], names=list(languages))


def read_records(path: Path, file_format: str) -> Iterator[dict]:
    """The records of a jsonl file, or of a csv or tsv file with a header line (a tsv has no quoting: quotes are
    text, as in GLUE's files), one dict each."""
    # line by line from bytes, so that a line that is not UTF-8 is named with its number
    if file_format in ("csv", "tsv"):
        tabs = dict(delimiter="\t", quoting=csv.QUOTE_NONE) if file_format == "tsv" else {}
        reader = csv.DictReader(iter_lines(path, keep_ends=True), **tabs)
        for record in reader:
            if None in record:  # DictReader files the values past the header's columns under None
                separator = "tab" if file_format == "tsv" else "comma inside an unquoted text? quote it"
                raise ValueError(
                    f"{path}, line {reader.line_num}: more values than the header has columns (a {separator})"
                )
            yield record
        return
    for number, line in enumerate(iter_lines(path), 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: invalid JSON ({error})") from error


def _table_batches(path: Path, languages: tuple[str, str]) -> Iterator[pa.RecordBatch]:
    file_format = _TABLE_FILE.fullmatch(path.name)["format"]
    columns: dict[str, list[str]] = {lang: [] for lang in languages}
    count = 0
    for number, record in enumerate(read_records(path, file_format), 1):
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
        count = number
        if len(columns[languages[0]]) == _CHUNK:
            yield pa.RecordBatch.from_pydict(columns)
            columns = {lang: [] for lang in languages}
    if not count:
        raise ValueError(f"{path}: empty file")
    if columns[languages[0]]:
        yield pa.RecordBatch.from_pydict(columns)


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


# ------------------------------------------------------------------------------------------- 2. getting the tokenizer


def obtain_tokenizer(args: DataArguments, train_text: datasets.Dataset) -> PreTrainedTokenizerBase:
    """The tokenizer of `args.tokenizer`, or a joint BPE tokenizer trained on (a sample of) the training pairs."""
    if args.tokenizer:
        return load_tokenizer(args.tokenizer)
    tokenizer = train_tokenizer(
        tokenizer_sample(
            train_text,
            (args.source_lang, args.target_lang),
            args.tokenizer_sample_sentences,
            args.tokenizer_sample_seed,
        ),
        vocab_size=args.vocab_size,
        lowercase=args.lowercase,
        split_punctuation=args.split_punctuation,
    )
    if args.mix_tag:  # one token, never split into pieces, that the real sources never hold
        tokenizer.add_special_tokens({"additional_special_tokens": [args.mix_tag]})
    return tokenizer


def tokenizer_sample(dataset: datasets.Dataset, columns: Iterable[str], sentences: int, seed: int) -> Iterator[str]:
    """The sentences of `columns`, or, when they number more than `sentences`, as many pairs as make up `sentences`
    drawn at random with `seed` (SentencePiece's input_sentence_size): the subwords of millions of sentences hardly
    differ, and training on a sample takes a fraction of the time."""
    columns = list(columns)
    rows = np.arange(dataset.num_rows)
    if dataset.num_rows * len(columns) > sentences:
        rows = np.sort(np.random.default_rng(seed).choice(dataset.num_rows, sentences // len(columns), replace=False))
    table = dataset.with_format("arrow")
    for start in range(0, len(rows), _CHUNK):
        chunk = table[rows[start : start + _CHUNK]]
        for column in columns:
            yield from chunk[column].to_pylist()


# --------------------------------------------------------------------------------------------------- 3. tokenizing

# token ids are below 2^31: int32 halves what the corpus takes on disk and in the page cache
TOKEN_IDS = datasets.Sequence(datasets.Value("int32"))


def encoder(tokenizer: PreTrainedTokenizerBase, limits: tuple[int | None, int | None]) -> Callable:
    """A function of (sources, targets) to their token ids, each side cut at its limit (None: not cut). A fast
    tokenizer that encodes targets as it does sources runs its Rust `encode_batch_fast` on all cores (1.65x the
    throughput of `tokenizer(...)` on 2 cores, measured); any other goes through `tokenizer(text_target=...)`."""
    # transformers switches a tokenizer that encodes targets otherwise (Marian's, mBART's) with this method
    same_for_targets = not hasattr(tokenizer, "_switch_to_target_mode")
    if tokenizer.is_fast and same_for_targets:
        sides = []
        for limit in limits:
            side = type(tokenizer.backend_tokenizer).from_str(tokenizer.backend_tokenizer.to_str())
            side.no_padding()
            if limit is None:
                side.no_truncation()
            else:
                side.enable_truncation(limit)
            sides.append(side)

        def encode(sources: list[str], targets: list[str]) -> tuple[list[list[int]], list[list[int]]]:
            source_side, target_side = sides
            source_ids, target_ids = source_side.encode_batch_fast(sources), target_side.encode_batch_fast(targets)
            return [e.ids for e in source_ids], [e.ids for e in target_ids]

        return encode

    def encode_slowly(sources: list[str], targets: list[str]) -> tuple[list[list[int]], list[list[int]]]:
        source_cut, target_cut = ({"truncation": True, "max_length": limit} if limit else {} for limit in limits)
        source_ids = tokenizer(sources, **source_cut)["input_ids"]
        target_ids = tokenizer(text_target=targets, **target_cut)["input_ids"]
        return source_ids, target_ids

    return encode_slowly


def tokenize(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    args: DataArguments,
    keep_text: bool,
    into: Path | None = None,
    source_tag: str | None = None,
) -> datasets.Dataset:
    """Add `input_ids` and `labels` (token ids, `</s>` appended). The training split (`keep_text=False`) keeps only
    the ids and leaves out pairs longer than max_source_length / max_target_length, as fairseq does: a target cut
    short would teach the model to stop mid-sentence. An evaluation split keeps its text and every pair, cut at the
    limits. With `into` the result is written to that Arrow file and memory-mapped. `source_tag` begins every source
    sentence (tagged back-translation)."""
    source, target = args.source_lang, args.target_lang
    limits = (args.max_source_length, args.max_target_length)
    encode = encoder(tokenizer, limits if keep_text else (None, None))

    def encode_batch(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        sources = [f"{source_tag} {text}" for text in batch[source]] if source_tag else batch[source]
        source_ids, target_ids = encode(sources, batch[target])
        if keep_text:
            return {"input_ids": source_ids, "labels": target_ids}
        fits = [len(s) <= limits[0] and len(t) <= limits[1] for s, t in zip(source_ids, target_ids, strict=True)]
        return {
            "input_ids": [ids for ids, kept in zip(source_ids, fits, strict=True) if kept],
            "labels": [ids for ids, kept in zip(target_ids, fits, strict=True) if kept],
        }

    kept_columns = dataset.features if keep_text else {}
    return dataset.map(
        encode_batch,
        batched=True,
        batch_size=10_000,
        remove_columns=[] if keep_text else dataset.column_names,
        features=datasets.Features({**kept_columns, "input_ids": TOKEN_IDS, "labels": TOKEN_IDS}),
        cache_file_name=str(into) if into else None,
        keep_in_memory=into is None,
        load_from_cache_file=False,
        desc="tokenizing",
    )


# ---------------------------------------------------------------------------------------------------- 4. the cache

# what a prepared folder holds; a folder of another format is prepared again rather than misread
CORPUS_FORMAT = 1
MANIFEST = "corpus.json"
TOKENIZER_FOLDER = "tokenizer"
FILE_DIGESTS = "file_digests.json"  # in the corpus cache, beside the prepared folders


@dataclasses.dataclass
class Corpus:
    tokenizer: PreTrainedTokenizerBase
    train: datasets.Dataset | None  # columns: input_ids, labels (token ids, EOS appended); None: evaluation alone
    validation: datasets.Dataset | None  # columns: source and target language text, input_ids, labels
    test: datasets.Dataset | None
    folder: Path | None = None  # the prepared folder the splits are memory-mapped from
    split_names: dict[str, str] = dataclasses.field(default_factory=dict)  # role -> the split's name in the data


def read_split(found: SplitSource, into: Path | None = None) -> datasets.Dataset:
    """The pairs of one split as a Dataset of the two language columns: local files streamed into the Arrow file
    `into` and memory-mapped (or, without `into`, held in memory); a Hub dataset from datasets' own cache."""
    if found.hub_id is not None:
        return found.load_hub()
    schema = pa.schema([(lang, pa.string()) for lang in found.languages])
    if into is None:
        return datasets.Dataset(datasets.table.InMemoryTable(pa.Table.from_batches(list(found.records()), schema)))
    with pa.OSFile(str(into), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in found.records():
            writer.write_batch(batch)
    return datasets.Dataset.from_file(str(into))


def split_sources(args: DataArguments) -> dict[str, SplitSource]:
    """Each split's data, found (not read) so that a missing file, split or language is named before any work."""
    names = {"train": args.train_split, "validation": args.validation_split, "test": args.test_split}
    languages = (args.source_lang, args.target_lang)
    return {
        role: split_source(args.dataset, *languages, name, name=args.dataset_config)
        for role, name in names.items()
        if name
    }


def corpus_cache(args: DataArguments) -> Path:
    """Where prepared corpora are kept: `cache_dir`, else beside datasets' own cache (HF_DATASETS_CACHE), which a
    cluster typically points at a shared disk."""
    return Path(args.cache_dir) if args.cache_dir else default_corpus_cache()


def default_corpus_cache() -> Path:
    return Path(datasets.config.HF_DATASETS_CACHE) / "vanilla_transformer"


def fingerprint(
    args: DataArguments,
    sources: dict[str, SplitSource],
    tokenizer: PreTrainedTokenizerBase | None,
    source_tag: str | None = None,
):
    """A name for the prepared corpus that changes with the data (the files' bytes, or the Hub dataset's own
    fingerprint) and with every setting that shapes what is prepared."""
    if tokenizer is not None:
        tokenizer_setting = {"given": tokenizer_identity(tokenizer)}
    else:
        tokenizer_setting = {
            "vocab_size": args.vocab_size,
            "lowercase": args.lowercase,
            "split_punctuation": args.split_punctuation,
            "min_frequency": MIN_FREQUENCY,
            "sample_sentences": args.tokenizer_sample_sentences,
            "sample_seed": args.tokenizer_sample_seed,
            **({"mix_tag": args.mix_tag} if args.mix_tag else {}),
        }
    file_digests = FileDigests(corpus_cache(args))
    settings = {
        "format": CORPUS_FORMAT,
        "splits": {role: source.identity(file_digests) for role, source in sources.items()},
        "languages": [args.source_lang, args.target_lang],
        "lengths": [args.max_source_length, args.max_target_length],
        "tokenizer": tokenizer_setting,
        **({"source_tag": source_tag} if source_tag else {}),
    }
    return hashlib.blake2b(json.dumps(settings, sort_keys=True).encode(), digest_size=10).hexdigest()


def is_prepared(path: str | os.PathLike) -> bool:
    return (Path(path) / MANIFEST).is_file()


def prepare_corpus(
    args: DataArguments, tokenizer: PreTrainedTokenizerBase | None = None, source_tag: str | None = None
) -> Corpus:
    """The corpus of `args`, from its prepared folder in the cache when there is one, else prepared into it first.
    `args.dataset` may also be a prepared folder itself. `tokenizer` (a starting model's) encodes it as a
    `--tokenizer` would; `source_tag` begins every source sentence."""
    given = tokenizer or (load_tokenizer(args.tokenizer) if args.tokenizer else None)
    if is_prepared(args.dataset) and source_tag:
        raise ValueError(
            f"{args.dataset} is a prepared folder, already tokenized: a tag (mix_tag) goes in as the text is "
            "tokenized, so pass the data files instead"
        )
    if is_prepared(args.dataset):
        try:
            corpus = load_prepared(Path(args.dataset), args)
        except DamagedCorpusError as error:
            raise DamagedCorpusError(
                error.folder,
                f"{error.what}: prepare it again (vanilla-transformer prepare with the flags that made it: a damaged "
                "folder of the cache is prepared anew), copy it again, or pass the data files as --dataset",
            ) from error
        if given is not None and tokenizer_identity(given) != tokenizer_identity(corpus.tokenizer):
            raise ValueError(
                f"{args.dataset} was prepared with another tokenizer than this run's: pass the data files to prepare "
                "them with this run's tokenizer, or prepare the folder again (vanilla-transformer prepare)"
            )
        return corpus
    sources = split_sources(args)
    folder = corpus_cache(args) / fingerprint(args, sources, given, source_tag)
    for abandoned in remove_abandoned(folder.parent):
        warnings.warn(f"removed {abandoned}, left by a preparation that did not finish", stacklevel=2)
    if is_prepared(folder):
        try:
            return load_prepared(folder, args)
        except DamagedCorpusError as error:
            # the cache can make it again from the data: it does, rather than stop the run
            warnings.warn(f"{error}; it is prepared again", stacklevel=2)
            remove_damaged(folder)
    if not is_prepared(folder):  # another process may have prepared it meanwhile
        build_corpus(folder, sources, given, args, source_tag)
    return load_prepared(folder, args)


def build_corpus(
    folder: Path, sources: dict[str, SplitSource], tokenizer, args: DataArguments, source_tag: str | None = None
) -> None:
    """Prepare into a partial folder and rename it into place when complete, so that a folder with a manifest is
    always whole; a process that loses a race to prepare the same corpus keeps the winner's."""
    with preparing(folder) as partial:
        # every split is read before a tokenizer is trained, so that a broken one is found out at once
        texts = {role: read_split(source, partial / f"{role}.text.arrow") for role, source in sources.items()}
        tokenizer = tokenizer or obtain_tokenizer(args, texts["train"])
        tokenizer.save_pretrained(partial / TOKENIZER_FOLDER)
        rows = {}
        for role, text in texts.items():
            into = partial / f"{role}.arrow"
            rows[role] = tokenize(text, tokenizer, args, keep_text=role != "train", into=into, source_tag=source_tag)
            rows[role] = rows[role].num_rows
        # an evaluation set alone (--extra_eval_datasets) has no training split to leave pairs out of
        left_out = texts["train"].num_rows - rows["train"] if "train" in texts else 0
        if left_out:
            warnings.warn(
                f"{left_out} of {texts['train'].num_rows} training pairs left out: longer than max_source_length="
                f"{args.max_source_length} or max_target_length={args.max_target_length} tokens",
                stacklevel=3,
            )
        del texts
        for path in partial.glob("*.text.arrow"):  # the training text is not kept; evaluation splits keep theirs
            path.unlink()
        manifest = {
            "format": CORPUS_FORMAT,
            "languages": [args.source_lang, args.target_lang],
            "dataset": str(args.dataset),
            "splits": {role: getattr(args, f"{role}_split") for role in sources},
            "rows": rows,
            "left_out_training_pairs": left_out,
            "max_source_length": args.max_source_length,
            "max_target_length": args.max_target_length,
            # what opening the folder checks: a file cut short or lost since is named, not misread
            "files": file_sizes(partial),
        }
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        with contextlib.suppress(OSError):  # another process renamed its copy first: it is the same corpus
            partial.rename(folder)


def load_prepared(folder: Path, args: DataArguments | None = None) -> Corpus:
    """Memory-map a prepared folder's splits (nothing is read into memory) and load its tokenizer. A file missing, of
    another size than the preparation wrote, or unreadable is a `DamagedCorpusError` naming it."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except ValueError as error:
        raise DamagedCorpusError(folder, f"{folder / MANIFEST} is not JSON ({error})") from error
    if manifest.get("format") != CORPUS_FORMAT:
        raise ValueError(
            f"{folder} was prepared in format {manifest.get('format')}, this version reads {CORPUS_FORMAT}: "
            "prepare the corpus again (vanilla-transformer prepare)"
        )
    if args is not None and manifest["languages"] != [args.source_lang, args.target_lang]:
        raise ValueError(
            f"{folder} is prepared for {'->'.join(manifest['languages'])}, not "
            f"{args.source_lang}->{args.target_lang} (--source_lang/--target_lang)"
        )
    check_file_sizes(folder, manifest.get("files", {}))  # folders prepared before the sizes were kept: not checked
    splits = {}
    for role in manifest["splits"]:
        path = folder / f"{role}.arrow"
        try:
            splits[role] = datasets.Dataset.from_file(str(path))
        except (pa.ArrowException, OSError) as error:
            raise DamagedCorpusError(folder, f"{path} does not read ({error})") from error
    try:
        tokenizer = load_tokenizer(folder / TOKENIZER_FOLDER)
    except OSError as error:  # CorruptFileError and a missing tokenizer alike
        raise DamagedCorpusError(folder, str(error)) from error
    return Corpus(
        tokenizer, splits.get("train"), splits.get("validation"), splits.get("test"), folder, manifest["splits"]
    )


# ----------------------------------------------------------------------------- 5. corpora beside the main one


def prepare_evaluation_set(args: DataArguments, dataset: str, split: str, tokenizer) -> datasets.Dataset:
    """One split of another dataset to evaluate on (--extra_eval_datasets), prepared and cached as the corpus is,
    with the run's tokenizer and length limits, its text kept. Its languages are the run's."""
    set_args = _beside(args, dataset, train_split="", validation_split=split, test_split=None)
    try:
        corpus = prepare_corpus(set_args, tokenizer)
    except (ValueError, OSError) as error:
        raise type(error)(f"extra_eval_datasets {dataset}:{split}: {error}") from error
    # a prepared folder holds the splits it was prepared with, by role
    roles = corpus.split_names
    role = next((role for role, name in roles.items() if split in (role, name) and role != "train"), None)
    if role is None or getattr(corpus, role) is None:
        raise ValueError(
            f"extra_eval_datasets {dataset}:{split}: the prepared folder holds no evaluation split {split!r}; it has "
            + ", ".join(f"{role} ({name})" for role, name in roles.items())
        )
    return getattr(corpus, role)


def prepare_mix(args: DataArguments, tokenizer) -> datasets.Dataset:
    """The training pairs of --mix_dataset (replay), prepared and cached as the corpus is, with the run's tokenizer
    and length limits. Its languages must be the run's."""
    mix_args = _beside(args, args.mix_dataset, train_split=args.mix_split, validation_split="", test_split=None)
    try:
        return prepare_corpus(mix_args, tokenizer, source_tag=args.mix_tag).train
    except (ValueError, OSError) as error:
        raise type(error)(f"mix_dataset {args.mix_dataset}: {error}") from error


def check_beside_sources(args: DataArguments) -> None:
    """Find the files of the replay corpus and of the extra evaluation sets (not read), so that a missing file,
    split or language is named before the model or the main corpus loads."""
    found = [(f"extra_eval_datasets {dataset}:{split}", dataset, split) for _, dataset, split in args.extra_eval_sets()]
    if args.mix_dataset:
        found.append((f"mix_dataset {args.mix_dataset}", args.mix_dataset, args.mix_split))
    for flag, dataset, split in found:
        if is_prepared(dataset):
            continue  # its languages are checked when it is loaded
        try:
            split_source(dataset, args.source_lang, args.target_lang, split, name=_config_of(args, dataset))
        except (ValueError, OSError) as error:
            raise type(error)(f"{flag}: {error}") from error


def _beside(args: DataArguments, dataset: str, **splits) -> DataArguments:
    """The data arguments of a corpus beside the main one: its dataset and splits, the run's languages, limits
    and cache, and nothing of its own beside."""
    return dataclasses.replace(
        args,
        dataset=dataset,
        dataset_config=_config_of(args, dataset),
        extra_eval_datasets=[],
        mix_dataset=None,
        mix_ratio=None,
        mix_tag=None,
        **splits,
    )


def _config_of(args: DataArguments, dataset: str) -> str | None:
    """The Hub configuration name applies to the main dataset; another is read without one."""
    return args.dataset_config if dataset == args.dataset else None
