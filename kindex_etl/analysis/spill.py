"""What an analysis finds, kept on local disk rather than in memory until it is written out.

An analysis streams the runs one bucket of whole series at a time, but what it finds used to
pile up in memory: over 17.5M runs, 38,399 changes named 2.4M runs (`before_run_ids` and
`after_run_ids`, ~0.4 GiB as Python strings) and the report's 580,081 release points took
0.26 GiB. Both grow with the warehouse, not with a bucket (docs/performance.md, "The
regressions step, stop 22").

* `RunIdSpill`: the two run-id lists of every change, in an Arrow IPC file; the change rows
  an analysis holds carry everything else. `attach` gives the whole rows back, a chunk at a
  time, for the commit and for `--json`.
* `PointSpill`: the release points, one Arrow IPC file per kernel, because the report is
  written one kernel's page at a time.

Each spill lives in its own temporary folder, removed by `close()` or, at the latest, when
the spill is garbage-collected or the process exits.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from kindex_etl.scratch import ScratchDir

RUN_ID_FIELDS = ("before_run_ids", "after_run_ids")
_RUN_IDS_SCHEMA = pa.schema([(name, pa.list_(pa.string())) for name in RUN_ID_FIELDS])
ATTACH_CHUNK = 4096


def read_ipc(path: Path) -> pa.Table:
    """An Arrow IPC file of this machine's spills, memory-mapped (buffers keep the mapping)."""
    with pa.memory_map(str(path)) as source:
        return ipc.open_file(source).read_all()


class _Folder:
    """A scratch folder that outlives no one: removed on close, collection or exit (and, after
    a SIGKILL, by the next run's sweep: `kindex_etl.scratch`)."""

    def __init__(self, name: str) -> None:
        scratch = ScratchDir.create(name)
        self.path = scratch.path
        self._finalizer = weakref.finalize(self, scratch.remove)

    def close(self) -> None:
        self._finalizer()


class RunIdSpill:
    """The run-id lists of an analysis's changes, by change id, on local disk."""

    def __init__(self) -> None:
        self._folder = _Folder("run-ids")
        self._path = self._folder.path / "run_ids.arrow"
        self._writer: ipc.RecordBatchFileWriter | None = None
        self._row: dict[str, int] = {}
        self._sealed = False  # read from: an IPC file is written once, then only read

    def __len__(self) -> int:
        return len(self._row)

    def take(self, rows: Iterable[dict[str, Any]]) -> None:
        """Move the run-id lists out of `rows` (changed in place) into the spill."""
        if self._sealed:
            raise RuntimeError("run ids were read back already: the spill takes no more")
        columns: dict[str, list[Any]] = {name: [] for name in RUN_ID_FIELDS}
        for row in rows:
            change_id = row["change_id"]
            if change_id in self._row:
                # The change id is the regressions table's key: one analysis finds it once.
                raise ValueError(f"change {change_id} found twice in one analysis")
            self._row[change_id] = len(self._row)
            for name in RUN_ID_FIELDS:
                columns[name].append(row.pop(name))
        if not columns[RUN_ID_FIELDS[0]]:
            return
        if self._writer is None:
            self._writer = ipc.new_file(self._path, _RUN_IDS_SCHEMA)
        self._writer.write_table(pa.table(columns, schema=_RUN_IDS_SCHEMA))

    def attach(
        self, rows: Sequence[dict[str, Any]], chunk: int = ATTACH_CHUNK
    ) -> Iterator[dict[str, Any]]:
        """`rows` (in their order) with their run-id lists back, as new dicts; `chunk` rows'
        lists are read at a time. A row the spill does not know gets empty lists."""
        self._finish()
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            found = [self._row.get(r["change_id"]) for r in part]
            ids = self._read([i for i in found if i is not None])
            at = iter(range(len(ids[RUN_ID_FIELDS[0]])))
            for row, i in zip(part, found, strict=True):
                if i is None:
                    yield {**row, **{name: [] for name in RUN_ID_FIELDS}}
                    continue
                j = next(at)
                yield {**row, **{name: ids[name][j] for name in RUN_ID_FIELDS}}

    def _read(self, indices: list[int]) -> dict[str, list[Any]]:
        if not indices:
            return {name: [] for name in RUN_ID_FIELDS}
        # Mapped, and only the wanted rows copied out: the pages read go with the mapping, so
        # the resident set never holds more than a chunk's lists.
        table = read_ipc(self._path).take(pa.array(indices, pa.int64()))
        return {name: table.column(name).to_pylist() for name in RUN_ID_FIELDS}

    def _finish(self) -> None:
        self._sealed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            return
        if not self._path.exists():
            ipc.new_file(self._path, _RUN_IDS_SCHEMA).close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._folder.close()


class PointSpill:
    """Release points (`detect.release_points` tables), split by kernel into IPC files.

    `append` takes a bucket's points; `kernel_frames` gives each kernel's points as pandas, in
    kernel order, one kernel in memory at a time; `table` all of them (small warehouses,
    tests). The files hold the order points were appended in.
    """

    def __init__(self) -> None:
        self._folder = _Folder("points")
        self._writers: dict[str, ipc.RecordBatchFileWriter] = {}
        self._files: dict[str, Path] = {}
        self._schema: pa.Schema | None = None

    def append(self, points: pa.Table) -> None:
        if not points.num_rows:
            return
        if self._schema is None:
            self._schema = points.schema
        points = points.cast(self._schema)
        column = points.column("kernel")
        for kernel in pc.unique(column).to_pylist():
            part = points.filter(pc.equal(column, kernel))
            writer = self._writers.get(kernel)
            if writer is None:
                # Kernel names are data: the file is named by its position, never by the name.
                path = self._folder.path / f"kernel-{len(self._files):05d}.arrow"
                self._files[kernel] = path
                writer = self._writers[kernel] = ipc.new_file(path, self._schema)
            writer.write_table(part)

    def kernels(self) -> list[str]:
        return sorted(self._files)

    def read(self, kernel: str) -> pa.Table:
        return read_ipc(self.path(kernel))

    def path(self, kernel: str) -> Path:
        """The kernel's points file, complete (for a reader in another process)."""
        self._finish()
        return self._files[kernel]

    def kernel_frames(self) -> Iterator[tuple[str, pd.DataFrame]]:
        for kernel in self.kernels():
            yield kernel, self.read(kernel).to_pandas()

    def table(self) -> pa.Table:
        """Every point, kernel after kernel (no columns when there are none)."""
        parts = [self.read(k) for k in self.kernels()]
        return pa.concat_tables(parts) if parts else pa.table({})

    def _finish(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def close(self) -> None:
        self._finish()
        self._folder.close()
