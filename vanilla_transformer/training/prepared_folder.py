"""A prepared corpus folder on disk, in the cache that several runs (and hosts of a cluster) share: written whole or not
at all, checked when it is opened, and no partial folder left behind by a preparation that was killed.

- A preparation writes into `.<fingerprint>.<pid>.partial` while it holds a lock on `.<fingerprint>.<pid>.partial.lock`
  (flock: the kernel lets go of it when the process dies, however it dies, and NFS carries it across hosts), then
  renames the folder into place. A later preparation removes the partial folders whose lock nobody holds: their
  preparation is gone; a folder whose lock is held belongs to a preparation still running and is left alone.
- The manifest records every file's size; opening the folder checks them, so a file cut short (a disk error, an
  interrupted copy of the cache) is found and named before pyarrow trips over it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no locks, and partial folders are left for a person to remove
    fcntl = None

PARTIAL_SUFFIX, LOCK_SUFFIX = ".partial", ".lock"


class DamagedCorpusError(ValueError):
    """A file of a prepared folder is missing, of another size than the preparation wrote, or unreadable."""

    def __init__(self, folder: Path, what: str):
        self.folder, self.what = folder, what
        super().__init__(f"the prepared corpus {folder} is damaged: {what}")


def partial_folder(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.{os.getpid()}{PARTIAL_SUFFIX}")


def lock_file(partial: Path) -> Path:
    return partial.with_name(partial.name + LOCK_SUFFIX)


@contextlib.contextmanager
def preparing(folder: Path) -> Iterator[Path]:
    """The partial folder to prepare `folder` in, under this process's lock; the partial folder and the lock go when
    the preparation ends, whole (renamed into place) or not."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_folder(folder)
    lock = lock_file(partial)
    fresh = lock.with_name(lock.name + ".new")
    with open(fresh, "w") as held:
        if fcntl is not None:
            fcntl.flock(held, fcntl.LOCK_EX)
        # locked before it has the name a cleaner looks for, and before the folder exists: never seen unlocked
        os.replace(fresh, lock)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            yield partial
        finally:
            shutil.rmtree(partial, ignore_errors=True)
            with contextlib.suppress(OSError):
                lock.unlink()


def remove_abandoned(cache: Path) -> list[Path]:
    """Remove the partial folders (and stray locks) under `cache` whose preparation no longer runs: nobody holds their
    lock. Returns what was removed."""
    if fcntl is None or not cache.is_dir():
        return []
    removed = []
    for path in sorted(cache.iterdir()):
        if not path.name.startswith(".") or not path.exists():  # gone with its folder, listed before
            continue
        if path.name.endswith(PARTIAL_SUFFIX) and path.is_dir():
            lock = lock_file(path)
        elif path.name.endswith(PARTIAL_SUFFIX + LOCK_SUFFIX) and not path.with_name(path.name[:-5]).exists():
            lock = path  # its folder is gone already: the lock alone was left
        else:
            continue
        if not lock.exists():  # a folder of a version that took no locks: its pid tells
            if not _pid_alive(path.name):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            continue
        # held while the files go, so that two cleaners do not race over them
        with contextlib.suppress(OSError), open(lock, "r+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while the preparation runs
            if lock is not path:
                shutil.rmtree(path, ignore_errors=True)
            lock.unlink()
            removed.append(path)
    return removed


def _pid_alive(name: str) -> bool:
    """For a partial folder without a lock file (`.<fingerprint>.<pid>.partial`): whether its pid runs on this host.
    Such a folder comes from a version that took no locks; an unreadable name counts as alive, and stays."""
    try:
        pid = int(name.split(".")[2])
    except (IndexError, ValueError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def file_sizes(folder: Path) -> dict[str, int]:
    """Every file under `folder`, by its path relative to it, with its size."""
    return {
        path.relative_to(folder).as_posix(): path.stat().st_size for path in sorted(folder.rglob("*")) if path.is_file()
    }


def check_file_sizes(folder: Path, recorded: dict[str, int]) -> None:
    """Raise DamagedCorpusError naming the first file of `recorded` that is missing or of another size."""
    for name, size in recorded.items():
        path = folder / name
        try:
            found = path.stat().st_size
        except FileNotFoundError:
            raise DamagedCorpusError(folder, f"{path} is missing") from None
        if found != size:
            raise DamagedCorpusError(folder, f"{path} holds {found:,} bytes, and the preparation wrote {size:,}")


def remove_damaged(folder: Path) -> None:
    """Take a damaged folder out of the cache: renamed first (at once, and a run that has it mapped keeps its pages),
    then deleted. Another process that took it out first is no error."""
    aside = folder.with_name(f".{folder.name}.{os.getpid()}.damaged")
    try:
        folder.rename(aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)
