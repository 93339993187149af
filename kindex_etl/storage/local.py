"""Local-folder object store: the embedded default, no server, no credentials."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from kindex_etl.errors import NotFound, PreconditionFailed, StorageError, UnsafeKey
from kindex_etl.storage.base import ObjectInfo, check_key

# delete() prunes empty folders, so a folder just made for a new file can vanish before the
# file lands in it when another process deletes at the same time; making it again settles it.
_PRUNE_RETRIES = 5


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Read once at import (os.umask can only be read by setting it, which is not thread-safe).
_FILE_MODE = 0o666 & ~_umask()


def _etag(stat: os.stat_result) -> str:
    # Size plus mtime stands in for S3's ETag: hashing a 1 GB CSV just to learn it is unchanged
    # would cost more than the rest of an incremental run.
    return f"{stat.st_size:x}-{stat.st_mtime_ns:x}"


class LocalStore:
    def __init__(self, root: str | Path, *, create: bool = False) -> None:
        self.root = Path(root).resolve()
        if create:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create {self.root}: {exc.strerror}") from None
        if not self.root.is_dir():
            raise StorageError(f"not a directory: {self.root}")
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        path = (self.root / check_key(key)).resolve()
        if self.root not in path.parents:
            # A symlink (or a link in a parent folder) leading out of the root.
            raise UnsafeKey(f"unsafe object key: {key!r} leads outside {self.root}")
        return path

    def _info(self, key: str, path: Path | str) -> ObjectInfo:
        stat = os.stat(path)
        return ObjectInfo(
            key=key,
            size=stat.st_size,
            etag=_etag(stat),
            last_modified=datetime.fromtimestamp(stat.st_mtime, tz=UTC),
        )

    def list(self, prefix: str = "", *, start_after: str = "") -> Iterator[ObjectInfo]:
        keys: list[tuple[str, str]] = []
        # Walk only the folder the prefix names: listing `_kindex/log/` must not walk the data.
        start = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        root = str(self.root)
        # Keys from strings, not a Path per entry: the log folder holds a file per commit, and
        # every start-up lists it (a year of hourly commits made pathlib most of the start-up).
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames.sort()
            folder = os.path.relpath(dirpath, root).replace(os.sep, "/")
            base = "" if folder == "." else folder + "/"
            for name in filenames:
                key = base + name
                if key <= start_after or not key.startswith(prefix):
                    continue
                if name.startswith(".kindex-tmp-") or name.endswith(".kindex-lock"):
                    continue
                keys.append((key, os.path.join(dirpath, name)))
        for key, path in sorted(keys):
            with contextlib.suppress(FileNotFoundError):
                yield self._info(key, path)

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            return self._info(key, path) if path.is_file() else None
        except FileNotFoundError:
            return None

    def open_read(self, key: str) -> BinaryIO:
        try:
            return self._path(key).open("rb")
        except FileNotFoundError:
            raise NotFound(key) from None

    def get_bytes(self, key: str) -> bytes:
        with self.open_read(key) as fh:
            return fh.read()

    def read_tail(self, key: str, size: int) -> bytes:
        with self.open_read(key) as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(fh.tell() - size, 0))
            return fh.read()

    def _tmp_beside(self, path: Path) -> Path:
        for _ in range(_PRUNE_RETRIES):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd, name = tempfile.mkstemp(prefix=".kindex-tmp-", dir=path.parent)
            except FileNotFoundError:
                continue  # a concurrent delete() pruned the empty folder; make it again
            # mkstemp makes 0600: control files would be private while data files (written
            # by open()) follow the umask. Everything in a warehouse is readable alike.
            os.fchmod(fd, _FILE_MODE)
            os.close(fd)
            return Path(name)
        raise StorageError(f"cannot create a file in {path.parent}")

    def put_bytes(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        path = self._path(key)
        tmp = self._tmp_beside(path)
        try:
            tmp.write_bytes(data)
            # link() and rename keep size and mtime: the new object's ETag, known before another
            # process can move or replace it.
            etag = _etag(tmp.stat())
            if if_none_match:
                # link() fails if the name exists: an atomic create-if-absent on POSIX.
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise PreconditionFailed(key) from None
            elif if_match is not None:
                # Local folders serve one machine; a lock file makes compare-and-swap atomic
                # between processes there.
                with _exclusive(path.with_name(path.name + ".kindex-lock")):
                    current = self.head(key)
                    if current is None or current.etag != if_match:
                        raise PreconditionFailed(key)
                    os.replace(tmp, path)
            else:
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return etag

    def put_file(self, key: str, path: Path) -> str:
        dest = self._path(key)
        tmp = self._tmp_beside(dest)
        try:
            shutil.copyfile(path, tmp)
            etag = _etag(tmp.stat())
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        # Not head(key): a concurrent publisher may have moved the file on already.
        return etag

    def move_file(self, key: str, path: Path) -> str:
        """Like put_file, but takes the file over (a rename when on the same filesystem)."""
        dest = self._path(key)
        etag = _etag(path.stat())  # a rename keeps size and mtime
        for _ in range(_PRUNE_RETRIES):
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(path, dest)
            except FileNotFoundError:
                if not path.exists():
                    raise
                continue  # a concurrent delete() pruned the empty folder; make it again
            except OSError:
                return self.put_file(key, path)  # another filesystem: copy instead
            # Not head(key): a concurrent publisher may have moved the file on already.
            return etag
        return self.put_file(key, path)

    def copy(self, src_key: str, dst_key: str) -> None:
        src, dst = self._path(src_key), self._path(dst_key)
        if not src.exists():
            raise NotFound(src_key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(src, dst)
        except FileNotFoundError:
            # A concurrent publisher moved it first (exists() above was only a look).
            raise NotFound(src_key) from None

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        # Keep the tree tidy: empty staging folders would otherwise pile up.
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def local_path(self, key: str) -> Path | None:
        return self._path(key)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    import fcntl

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
