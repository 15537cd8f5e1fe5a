"""The source side of a split, read as `train` reads corpora (a folder of `{split}.{lang}` files, a jsonl/csv table,
or a Hub dataset), one language alone: back-translation starts from text in one language, with no pairs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from ..common.model_folder import HUB_ID
from ..tokenization import iter_lines
from ..training.corpus import _LOCAL_SUFFIXES, _TABLE_FILE, FileDigests, _folder_split, _load_hub, _table_batches

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
        """The sentences in order, streamed (a table's or a Hub dataset's may hold line breaks)."""
        if self.hub_id is not None:
            table = self._hub_dataset().with_format("arrow")
            for start in range(0, table.num_rows, _HUB_ROWS):
                yield from (text or "" for text in table[start : start + _HUB_ROWS][self.language].to_pylist())
        elif _TABLE_FILE.fullmatch(self.file.name):
            for batch in _table_batches(self.file, (self.language,)):
                yield from batch.column(0).to_pylist()
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

    def _hub_dataset(self):
        return _load_hub(self.hub_id, (self.language,), self.split, self.hub_config)


def find_source_side(dataset: str, language: str, split: str, hub_config: str | None = None) -> SourceSide:
    """Find (not read) the text of `split` in `language`, as `train` finds a split with both languages, so that a
    missing file, split or language is named before a model loads."""
    path = Path(dataset)
    if path.is_dir():
        return SourceSide(language, split, file=_folder_split(path, (language,), split).files[0])
    if path.is_file():
        if not _TABLE_FILE.fullmatch(path.name):
            raise ValueError(f"{path}: expected a .jsonl or .csv file (optionally .gz), or a folder")
        return SourceSide(language, split, file=path)
    # a Hub id is "name" or "owner/name"; anything else that names no existing path is a missing local one
    if path.suffix in _LOCAL_SUFFIXES or not HUB_ID.fullmatch(dataset):
        raise FileNotFoundError(f"{dataset}: no such file or folder")
    return SourceSide(language, split, hub_id=dataset, hub_config=hub_config)
