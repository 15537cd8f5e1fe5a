"""The source side of a split, read as `train` reads corpora (a folder of `{split}.{lang}` files, a jsonl/csv table,
or a Hub dataset), one language alone: back-translation starts from text in one language, with no pairs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from ..hub.connection import load_dataset_or_cache
from ..hub.push import HUB_ID
from ..tokenization import iter_lines
from ..training.corpus import _LOCAL_SUFFIXES, _TABLE_FILE, _TEXT_FILE, FileDigests, read_records

_HUB_ROWS = 10_000  # rows of a Hub dataset turned into Python strings at a time


@dataclasses.dataclass(frozen=True)
class SourceSide:
    """Where one split's text in `language` comes from: a text file of one sentence a line, a jsonl/csv table with a
    column (or `translation` field) per language, or a Hub dataset."""

    language: str
    split: str
    file: Path | None = None
    hub_id: str | None = None
    hub_config: str | None = None

    def texts(self) -> Iterator[str]:
        """The sentences in order, streamed; a line break inside one (a table's or a Hub dataset's text) becomes a
        space, so that the written corpus stays aligned line by line."""
        if self.hub_id is not None:
            yield from self._hub_texts()
        elif _TABLE_FILE.fullmatch(self.file.name):
            yield from self._table_texts()
        else:
            yield from iter_lines(self.file)

    def describe(self) -> str:
        return f"{self.hub_id} ({self.split})" if self.hub_id is not None else str(self.file)

    def line_name(self, index: int) -> str:
        """How a warning names the sentence at `index` (0-based)."""
        if self.hub_id is not None:
            return f"{self.hub_id} ({self.split}) row {index + 1}"
        return f"{self.file}:{index + 1}"

    def identity(self, digests: FileDigests) -> str:
        """What the text is known by: its file's bytes, or the Hub dataset's fingerprint."""
        if self.hub_id is not None:
            return f"hub:{self.hub_id}:{self.hub_config}:{self.split}:{self._hub_dataset()._fingerprint}"
        return f"file:{self.file.name}={digests(self.file)}"

    def _table_texts(self) -> Iterator[str]:
        file_format = _TABLE_FILE.fullmatch(self.file.name)["format"]
        for number, record in enumerate(read_records(self.file, file_format), 1):
            if isinstance(record, dict) and isinstance(record.get("translation"), dict):
                record = {**record, **record["translation"]}
            text = record.get(self.language) if isinstance(record, dict) else None
            if not isinstance(text, str):
                if number == 1 and isinstance(record, dict) and self.language not in record:
                    raise ValueError(
                        f"unknown language {self.language!r} in {self.file}: available columns: {', '.join(record)}"
                    )
                raise ValueError(f"{self.file}, record {number}: {self.language!r} is {text!r}, not a text")
            yield " ".join(text.splitlines())

    def _hub_dataset(self):
        dataset = load_dataset_or_cache(self.hub_id, self.hub_config, split=self.split)
        if "translation" in dataset.column_names:
            dataset = dataset.flatten()
            dataset = dataset.rename_columns(
                {name: name.removeprefix("translation.") for name in dataset.column_names if "." in name}
            )
        if self.language not in dataset.column_names:
            raise ValueError(
                f"unknown language {self.language!r} in {self.hub_id} ({self.split}): available columns: "
                + ", ".join(dataset.column_names)
            )
        return dataset.select_columns([self.language])

    def _hub_texts(self) -> Iterator[str]:
        table = self._hub_dataset().with_format("arrow")
        for start in range(0, table.num_rows, _HUB_ROWS):
            for text in table[start : start + _HUB_ROWS][self.language].to_pylist():
                yield " ".join((text or "").splitlines())


def find_source_side(dataset: str, language: str, split: str, hub_config: str | None = None) -> SourceSide:
    """Find (not read) the text of `split` in `language`, so that a missing file, split or language is named before
    a model loads."""
    path = Path(dataset)
    if path.is_file():
        if not _TABLE_FILE.fullmatch(path.name):
            raise ValueError(f"{path}: expected a .jsonl or .csv file (optionally .gz), or a folder")
        return SourceSide(language, split, file=path)
    if path.is_dir():
        text_files, splits = {}, set()
        for entry in sorted(path.iterdir()):
            if match := _TABLE_FILE.fullmatch(entry.name):
                text_files.setdefault((match["split"], None), entry)
                splits.add(match["split"])
            elif match := _TEXT_FILE.fullmatch(entry.name):
                text_files.setdefault((match["split"], match["lang"]), entry)
                splits.add(match["split"])
        found = text_files.get((split, language)) or text_files.get((split, None))
        if found is not None:
            return SourceSide(language, split, file=found)
        if split in splits:
            others = ", ".join(sorted(lang for name, lang in text_files if name == split and lang))
            raise ValueError(
                f"unknown language {language!r}: no {path / f'{split}.{language}'} (or .gz); split {split!r} has "
                f"{others or 'no text files'}"
            )
        raise ValueError(f"unknown split {split!r} in {path}: available splits: {', '.join(sorted(splits)) or 'none'}")
    # a Hub id is "name" or "owner/name"; anything else that names no existing path is a missing local one
    if path.suffix in _LOCAL_SUFFIXES or not HUB_ID.fullmatch(dataset):
        raise FileNotFoundError(f"{dataset}: no such file or folder")
    return SourceSide(language, split, hub_id=dataset, hub_config=hub_config)
