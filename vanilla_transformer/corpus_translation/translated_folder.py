"""The folder a corpus translation writes, built so that work of hours survives a kill:

- the translations are written in chunks of `chunk_sentences` lines, each renamed into place when whole, so a chunk
  file is whole or absent; a rerun skips the chunks there and gives the bytes an uninterrupted run gives;
- the plan (model, text, settings) is written first, and a rerun with another plan is refused rather than mixed in;
- when the last chunk is in, the process that wrote it joins them into `{split}.{lang}` files beside the splits
  copied as they are, writes `translation.json` (the mark of a finished folder) and removes the chunks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: one process at a time, with nothing to lock against
    fcntl = None

WORK = ".translating"  # the chunks and the plan, while the folder is not finished
PLAN = "plan.json"
FINISHED = "translation.json"


class TranslatedFolder:
    def __init__(self, folder: Path, plan: dict):
        self.folder, self.plan = folder, plan
        self.work = folder / WORK

    @property
    def finished(self) -> bool:
        return (self.folder / FINISHED).is_file()

    def check(self) -> None:
        """Before anything is written: refused, a file, a folder that holds anything else, and one started or finished
        with another plan (the differences named)."""
        if self.folder.exists() and not self.folder.is_dir():
            raise NotADirectoryError(f"output_dir {self.folder} is a file, not a folder")
        for marker in (self.folder / FINISHED, self.work / PLAN):
            if marker.is_file():
                self._check_same_plan(marker)
                return
        present = sorted(entry.name for entry in self.folder.iterdir()) if self.folder.is_dir() else []
        present = [name for name in present if name != WORK]
        if present:
            listed = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5 else "")
            raise ValueError(
                f"output_dir {self.folder} is not empty ({listed}) and holds no translation of this command: name an "
                "empty folder"
            )

    def start(self) -> None:
        """Write the plan, or continue the folder of the same plan; the partial chunks of a killed run go."""
        self.check()
        if self.finished:  # another process of the launch finished it meanwhile
            return
        if not (self.work / PLAN).is_file():
            self.work.mkdir(parents=True, exist_ok=True)
            partial = self.work / f".{PLAN}.{os.getpid()}.partial"
            partial.write_text(json.dumps(self.plan, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            try:
                os.link(partial, self.work / PLAN)  # the first process of a launch writes it; the others compare
            except FileExistsError:
                self._check_same_plan(self.work / PLAN)
            finally:
                partial.unlink()

    def _check_same_plan(self, marker: Path) -> None:
        try:
            written = json.loads(marker.read_text(encoding="utf-8"))
        except ValueError as error:
            raise ValueError(
                f"{marker} is not JSON ({error}): delete output_dir {self.folder} to start over"
            ) from error
        written = written.get("plan", written) if marker.name == FINISHED else written
        differences = [
            _difference(key, written.get(key), self.plan.get(key))
            for key in sorted(set(written) | set(self.plan))
            if written.get(key) != self.plan.get(key)
        ]
        if differences:
            raise ValueError(
                f"output_dir {self.folder} holds a translation of another corpus, model or settings ("
                f"{'; '.join(differences)}): name another folder, or delete it to start over"
            )

    # ----------------------------------------------------------------------------------------------- the chunks

    def chunk_file(self, role: str, index: int) -> Path:
        return self.work / role / f"chunk-{index:07d}.txt"

    def has_chunk(self, role: str, index: int) -> bool:
        return self.chunk_file(role, index).is_file()

    def remove_partial_chunk(self, role: str, index: int) -> None:
        """What a killed run left of a chunk: only the process that translates the chunk calls this, so no live
        writer's file goes, whatever machine of a launch wrote it."""
        for left in (self.work / role).glob(f".{self.chunk_file(role, index).name}.*.partial"):
            with contextlib.suppress(OSError):
                left.unlink()

    def write_chunk(self, role: str, index: int, translations: list[str]) -> None:
        """One chunk's translations, one a line, whole or not at all: written to a partial file, flushed to disk,
        renamed into place."""
        path = self.chunk_file(role, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        with partial.open("w", encoding="utf-8", newline="\n") as file:
            file.writelines(as_line(text) + "\n" for text in translations)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)

    def chunk_lines(self, role: str, chunks: int) -> Iterator[str]:
        for index in range(chunks):
            with self.chunk_file(role, index).open(encoding="utf-8", newline="\n") as file:
                for line in file:
                    yield line.removesuffix("\n")

    # ------------------------------------------------------------------------------------------- the finished folder

    @contextlib.contextmanager
    def finishing(self) -> Iterator[bool]:
        """Held by one process at a time: True when the folder is still to be finished by it."""
        if self.finished:
            yield False
            return
        self.work.mkdir(parents=True, exist_ok=True)
        with (self.work / ".finish.lock").open("w") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            yield not self.finished
        if self.finished:  # another process finished it while this one waited
            shutil.rmtree(self.work, ignore_errors=True)

    def write_split(self, name: str, language: str, lines: Iterable[str]) -> int:
        """`{name}.{language}` of the finished corpus, renamed into place when whole; returns its line count."""
        path = self.folder / f"{name}.{language}"
        partial = self.work / f".{path.name}.partial"
        count = 0
        with partial.open("w", encoding="utf-8", newline="\n") as file:
            for line in lines:
                file.write(as_line(line) + "\n")
                count += 1
        os.replace(partial, path)
        return count

    def copy_split(self, files: Iterable[Path]) -> None:
        """A split carried over byte for byte: its text files, under their own names."""
        for source in files:
            partial = self.work / f".{source.name}.partial"
            shutil.copyfile(source, partial)
            os.replace(partial, self.folder / source.name)

    def finish(self, record: dict) -> None:
        """Mark the folder finished (its record names the plan) and remove the chunks."""
        partial = self.work / f".{FINISHED}.partial"
        partial.write_text(json.dumps({"plan": self.plan, **record}, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, self.folder / FINISHED)
        shutil.rmtree(self.work, ignore_errors=True)


def as_line(text: str) -> str:
    """`text` as one line that reads back as it is (`iter_lines` splits on "\\n" and drops a final "\\r")."""
    return text.replace("\r\n", " ").replace("\n", " ").removesuffix("\r")


def _difference(key: str, there, here) -> str:
    if isinstance(there, dict) and isinstance(here, dict):  # name the parts that differ (the model's files, say)
        parts = sorted(name for name in set(there) | set(here) if there.get(name) != here.get(name))
        return f"{key}: {', '.join(parts)} differ"
    return f"{key} {_short(there)} there, {_short(here)} here"


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
