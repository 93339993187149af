"""Local scratch folders owned by their process, and the sweep that removes a dead one's.

Every folder kindex-etl makes under the temp folder (an ingest batch's Parquet, an
analysis's bucket spills, run-id lists and release points, the worker pool's shared state, a
compaction's rewrite, a commit's staged files) is a `ScratchDir`: created already locked
(flock on a file inside) and removed on every exit path the process sees. A SIGKILL, the OOM
killer or a container stop leaves it behind, up to gigabytes of spills; the kernel then
releases the lock, and `remove_orphaned` (run when an ingest or an analysis starts) removes
every folder whose lock it can take. The lock, not the age, tells a live folder from an
orphan: an analysis may keep its spills for longer than any grace period.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

PREFIX = "kindex-"
OWNER = ".kindex-owner"
# Folders of versions that made them without a lock: judged by their age alone (the orphan
# grace). Other `kindex-` folders without a lock (a GPU campaign's) are not ours to judge.
_UNLOCKED = re.compile(
    r"^kindex-([rt]?[0-9a-f]{16}|series|points|run-ids|workers|compact-[0-9a-f]{16})-"
)


@dataclass
class ScratchDir:
    """A local folder locked by its process for as long as that process lives."""

    path: Path
    _owner: IO[str] | None = None

    @classmethod
    def create(cls, name: str) -> ScratchDir:
        """A new folder `kindex-<name>-<random>` under the temp folder, already owned."""
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{name}-"))
        try:
            # Locked before it takes its name: a sweeper never finds the lock file unlocked
            # while its owner lives (a rename keeps the inode; the lock is on its open file).
            owner = (path / f"{OWNER}.new").open("w")
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(path / f"{OWNER}.new", path / OWNER)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return cls(path, owner)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._owner is not None:
            self._owner.close()
            self._owner = None

    def __enter__(self) -> Path:
        return self.path

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def _owner_is_dead(path: Path) -> bool:
    """Whether the folder's owner lock can be taken (True: its process is gone). Opened,
    never created; not followed if a link, never blocking (a FIFO in its place would hang
    every later run), and only a regular file counts."""
    fd = os.open(path / OWNER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileNotFoundError(path / OWNER)  # not a lock of ours: judged as unlocked
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    finally:
        os.close(fd)


def remove_orphaned(root: Path | None = None) -> list[Path]:
    """Remove the scratch folders of dead processes under the temp folder; returns them."""
    from kindex_etl.config import settings  # lazily: worker processes import this module

    root = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    now = time.time()
    me = os.getuid()
    for path in entries:
        try:
            st = path.lstat()
        except OSError:
            continue
        # Only our own real folders: another user's, or a link, is none of our business.
        if not path.name.startswith(PREFIX) or not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
            continue
        try:
            dead: bool | None = _owner_is_dead(path)
        except FileNotFoundError:
            dead = None  # removed meanwhile, not ours, or a folder without its lock yet
        except OSError:
            continue
        if dead is False:
            continue  # its process is alive
        # No lock: one of ours killed before it took the lock (a moment after mkdtemp), or one
        # made by a version from before locks. Only age tells: the orphan grace (1 h).
        if dead is None and (
            not _UNLOCKED.match(path.name) or now - st.st_mtime <= settings().orphan_grace_s
        ):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    return removed
