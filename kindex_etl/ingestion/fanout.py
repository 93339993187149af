"""The half of a commit batch that may run anywhere: read each object and normalize it.

A backfill fans its commit batches out to workers (Dask processes, other hosts) with
`normalize_objects`, and the process that commits absorbs the results one batch at a time, in
plan order (`Ingestor.process` with `Source.normalized`): classifying runs against the
warehouse's run index, writing, staging and committing stay there. A worker must not dedup:
two batches normalized from the same warehouse head can hold the same runs (the cumulative
file repeats every per-commit file's rows), and only the committer sees them in order.

So what a worker returns is pure, a function of the object's bytes and the catalog: retrying
it, or running it twice, commits nothing. Run keys are not in it: series numbers are interned
per process (`ColumnarNormalizer.series_index`), so the committer recomputes keys and value
fingerprints from the runs table with its own normalizer (`keys_of_stored`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from kindex_etl.catalog import Catalog, default_catalog
from kindex_etl.config import settings
from kindex_etl.errors import BadFile, StorageError
from kindex_etl.extract.discover import Candidate
from kindex_etl.extract.read import Malformed, RowBatch, count_lines, read_batches
from kindex_etl.ingestion.threads import prefetch
from kindex_etl.memory import bulk_collector, use_bulk_arrow_pool
from kindex_etl.normalize.columnar import ColumnarNormalizer
from kindex_etl.normalize.descriptors import Descriptor
from kindex_etl.storage import ObjectStore, open_store

# How a block travels (pickled by Dask) and waits in the committer: Arrow IPC, zstd buffers.
# Normalized rows are ~8x their CSV (the JSON documents ~4.4x); zstd makes that ~0.6x at a
# worker cost of ~0.6 s and a committer cost of ~0.2 s per 100k rows (measured, sample data).
IPC_CODEC = "zstd"


def _pack(data: pa.Table | pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=IPC_CODEC)
    with pa.ipc.new_stream(sink, data.schema, options=options) as writer:
        writer.write(data)
    return sink.getvalue()


def _unpack(buffer: pa.Buffer) -> pa.Table:
    return pa.ipc.open_stream(buffer).read_all()


@dataclass
class NormalizedBlock:
    """One CSV block of an object, normalized; no run key, no dedup."""

    runs: pa.Table  # RUN_WRITE_SCHEMA, one row per valid input row
    json_lines: pa.StringArray  # one document per run
    quarantine: pa.Table  # rows the normalizer held back
    descriptor_ids: np.ndarray  # per run: index into NormalizedObject.descriptors
    good: np.ndarray  # per run: its row in `read.batch`
    # The raw rows and their lines: a run the committer finds conflicting is held back as read.
    read: RowBatch


@dataclass
class PackedBlock:
    """A block as it travels and waits: its tables as zstd Arrow IPC, unpacked when absorbed.

    So a committer holding several batches ahead holds them compressed, and decodes one
    block at a time.
    """

    tables: dict[str, pa.Buffer]
    arrays: dict[str, np.ndarray]
    malformed: list[Malformed]
    offset: int
    rows: int

    @classmethod
    def pack(cls, b: NormalizedBlock) -> PackedBlock:
        return cls(
            tables={
                "runs": _pack(b.runs),
                "json_lines": _pack(pa.table({"line": b.json_lines})),
                "quarantine": _pack(b.quarantine),
                "batch": _pack(b.read.batch),
            },
            arrays={
                "descriptor_ids": b.descriptor_ids,
                "good": b.good,
                "lines": b.read.lines,
            },
            malformed=b.read.malformed,
            offset=b.read.offset,
            rows=b.read.batch.num_rows,
        )

    def unpack(self) -> NormalizedBlock:
        t = {name: _unpack(buffer) for name, buffer in self.tables.items()}
        lines = t["json_lines"].column(0).combine_chunks()
        assert isinstance(lines, pa.StringArray)
        return NormalizedBlock(
            runs=t["runs"],
            json_lines=lines,
            quarantine=t["quarantine"],
            descriptor_ids=self.arrays["descriptor_ids"],
            good=self.arrays["good"],
            read=RowBatch(
                t["batch"].combine_chunks().to_batches()[0]
                if t["batch"].num_rows
                else pa.RecordBatch.from_pylist([], schema=t["batch"].schema),
                self.arrays["lines"],
                self.malformed,
                self.offset,
            ),
        )


@dataclass
class NormalizedObject:
    """One upstream object as a worker made it: its blocks, or its rejection as a whole."""

    key: str
    etag: str
    # Packed as soon as made: a worker holds a batch compressed, not ~8x its CSV.
    blocks: list[PackedBlock] = field(default_factory=list)
    # The descriptors its runs use, in the order the worker first resolved them.
    descriptors: list[Descriptor] = field(default_factory=list)
    # A bad file: (reason, detail) and its physical lines (BadFile itself does not pickle).
    rejected: tuple[str, str] | None = None
    lines: int = 0

    @property
    def rows(self) -> int:
        return sum(b.rows + len(b.malformed) for b in self.blocks)

    def iter_blocks(self) -> Iterator[NormalizedBlock]:
        """The blocks in order, each unpacked only when it is reached."""
        for b in self.blocks:
            yield b.unpack()


_normalizer: tuple[str, ColumnarNormalizer] | None = None


def _normalizer_for(catalog: Catalog) -> ColumnarNormalizer:
    """The worker process's normalizer: descriptor caches survive between its tasks.

    Keyed by the catalog's version (which carries a hash of its files): a catalog arrives
    pickled, a new object per task, and identity would never match.
    """
    global _normalizer
    if (
        _normalizer is None
        or _normalizer[0] != catalog.version
        # A worker keeps its resolved descriptors between tasks up to the same cap.
        or _normalizer[1].descriptors_over(settings().descriptor_cap)
    ):
        _normalizer = (catalog.version, ColumnarNormalizer(catalog))
    return _normalizer[1]


def normalize_object(
    store: ObjectStore, candidate: Candidate, normalizer: ColumnarNormalizer
) -> NormalizedObject:
    """Read and normalize one object; a bad file anywhere in it rejects it whole."""
    key, etag = candidate.key, candidate.info.etag
    out = NormalizedObject(key=key, etag=etag)
    ids: list[np.ndarray] = []
    blocks: list[PackedBlock] = []
    try:
        for rb in prefetch(read_batches(store, key)):
            nb = normalizer.normalize(
                rb.batch,
                source_key=key,
                source_etag=etag,
                lines=rb.lines,
                software=candidate.software,
            )
            ids.append(nb.descriptor_ids)
            blocks.append(
                PackedBlock.pack(
                    NormalizedBlock(
                        runs=nb.runs,
                        json_lines=nb.json_lines,
                        quarantine=nb.quarantine,
                        descriptor_ids=nb.descriptor_ids,
                        good=nb.good,
                        read=rb,
                    )
                )
            )
    except BadFile as bad:
        return NormalizedObject(
            key=key,
            etag=etag,
            rejected=(bad.reason, bad.detail),
            lines=count_lines(store, key),
        )
    except StorageError as exc:
        raise StorageError(f"reading {key}: {exc}") from None
    # The worker's ids index its own, process-wide table: renumber them into the object's list.
    used = np.unique(np.concatenate(ids)) if ids else np.empty(0, np.int64)
    table = normalizer.table.descriptors
    out.descriptors = [table[i] for i in used.tolist()]
    for block in blocks:
        block.arrays["descriptor_ids"] = np.searchsorted(used, block.arrays["descriptor_ids"])
    out.blocks = blocks
    return out


def normalize_objects(
    upstream_url: str, batch: list[Candidate], catalog: Catalog | None = None
) -> list[NormalizedObject]:
    """A worker's share of one commit batch: every object read and normalized, in order."""
    store = open_store(upstream_url)
    normalizer = _normalizer_for(catalog or default_catalog())
    use_bulk_arrow_pool()
    with bulk_collector():
        return [normalize_object(store, c, normalizer) for c in batch]
