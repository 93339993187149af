"""An upstream CSV as varied as the real per-commit history, at any size.

Upstream's history is many benchmark sessions: one script run (a kernel, one config, its x
sweep, every provider, pass and metric) on one GPU for one release, its rows stamped a few
seconds apart as the sweep advances. Each 80,000-row block here is ~1,700 such sessions over
62 (kernel, x_name, config) shapes drawn from the real data files of the liger-kernel sdists
(`benchmark/data/all_benchmark_data.csv`; upstream's sample when none is given, `sample_csv()`),
each shape on three or four of the GPUs those files name, with configs changed between releases
the way upstream changes them (one numeric value doubled), wider x sweeps in some sessions, and the
measured values jittered per session. One session in six is one today's catalog holds back:
a GPU it cannot place, or a kernel name with a parameter embedded (`dyt_beta=True`, as
benchmark_dyt.py wrote it from 0.5.10 on).

    python benchmarks/realistic.py --rows 80000 --out /tmp/r.csv [--sdist-dir /tmp/sd]

prints the diversity of the first 80,000 rows (DuckDB): distinct (kernel, provider, pass,
metric, x, config, GPU) combinations, timestamps and shapes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

REPO = Path(__file__).resolve().parents[1]
# Upstream's real sample: beside the project where the shared folder is, else the copy the
# tests keep (compressed), so that every benchmark also runs in a clone alone.
SHARED_SAMPLE = REPO.parent / "shared" / "upstream-sample" / "all_benchmark_data.csv"
SAMPLE_GZ = REPO / "tests" / "fixtures" / "upstream-sample" / "all_benchmark_data.csv.gz"
BLOCK = 80_000
SHAPES_PER_BLOCK = 62
BLOCKS_PER_RELEASE = 4
HELD_BACK_SHARE = 1 / 6
UNPLACEABLE_GPU = "Intel Data Center GPU Max 1550"  # not in kindex_etl/catalog/gpus.json
SHAPE_KEY = ("kernel_name", "x_name", "extra_benchmark_config_str")
VARYING = ("timestamp", "liger_version", "gpu_name", "y_value_50", "y_value_20", "y_value_80")
_FIRST_INT = re.compile(r"(: )(\d+)([,}])")


def _read(data: bytes | Path) -> pa.Table:
    from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS

    source = pa.BufferReader(data) if isinstance(data, bytes) else str(data)
    types = {name: pa.string() for name in UPSTREAM_COLUMNS}
    table = pcsv.read_csv(
        source,
        convert_options=pcsv.ConvertOptions(strings_can_be_null=False, column_types=types),
    )
    return table.select(list(UPSTREAM_COLUMNS))


def sample_csv() -> Path:
    """Upstream's sample as a plain CSV file (the shared one, else the tests' copy unpacked)."""
    if SHARED_SAMPLE.is_file():
        return SHARED_SAMPLE
    data = gzip.decompress(SAMPLE_GZ.read_bytes())
    out = Path(tempfile.gettempdir()) / f"kindex-upstream-sample-{len(data)}.csv"
    if not out.is_file() or out.stat().st_size != len(data):
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(out)  # whole or not at all, for processes that start together
    return out


def real_rows(sdist_dir: Path | None) -> pa.Table:
    """Every row of the sdists' data files (or the shared sample), as upstream wrote it."""
    parts = []
    for sdist in sorted(sdist_dir.glob("liger_kernel-*.tar.gz")) if sdist_dir else []:
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                if member.name.endswith("benchmark/data/all_benchmark_data.csv"):
                    fh = tar.extractfile(member)
                    if fh is not None:
                        parts.append(_read(fh.read()))
    if not parts:
        parts.append(_read(sample_csv()))
    return pa.concat_tables(parts)


class Generator:
    def __init__(self, rows: pa.Table, seed: int = 13) -> None:
        self.rng = np.random.default_rng(seed)
        keep = [c for c in rows.column_names if c not in VARYING]
        # One row per distinct measurement point; its values are the first ones upstream had.
        distinct = rows.group_by(keep, use_threads=False).aggregate(
            [(c, "first") for c in ("y_value_50", "y_value_20", "y_value_80")]
        )
        distinct = distinct.rename_columns(
            [c.removesuffix("_first") for c in distinct.column_names]
        )
        self.base = distinct
        shape_of = [
            "\0".join(v)
            for v in zip(*(distinct.column(c).to_pylist() for c in SHAPE_KEY), strict=True)
        ]
        shapes: dict[str, list[int]] = {}
        for i, s in enumerate(shape_of):
            shapes.setdefault(s, []).append(i)
        self.shapes = [np.array(v) for _, v in sorted(shapes.items())]
        self.gpus = sorted(set(rows.column("gpu_name").to_pylist()))
        self.versions = sorted(
            set(rows.column("liger_version").to_pylist()),
            key=lambda v: [int(p) if p.isdigit() else 0 for p in re.split(r"[.+-]", v)],
        )
        self.kernels = self.base.column("kernel_name").to_pylist()
        self.configs = self.base.column("extra_benchmark_config_str").to_pylist()
        self.xs = self.base.column("x_value").to_pylist()

    def block(self, index: int, rows: int) -> pa.Table:
        rng = self.rng
        epoch = index // BLOCKS_PER_RELEASE
        n_shapes = SHAPES_PER_BLOCK
        # Fewer real shapes than that: the rest are the same scripts with a later config.
        chosen = np.concatenate(
            [
                rng.permutation(len(self.shapes)),
                np.random.default_rng(epoch).choice(
                    len(self.shapes), max(0, n_shapes - len(self.shapes))
                ),
            ]
        )[:n_shapes]
        # Per shape, for the whole block (a release's scripts are fixed): its GPUs (one in
        # three or four of them, in some shapes, a GPU the catalog cannot place), whether its
        # config is a later release's (one value doubled), its sweep wider, its kernel name
        # one with a parameter embedded.
        plan: list[tuple[int, list[str], str, str, bool]] = []
        for k, s in enumerate(int(c) for c in chosen):
            # While a release lasts, its commits re-run the same scripts on the same GPUs:
            # the shape's plan is a function of (release, shape), not of the block.
            srng = np.random.default_rng([epoch, s, int(k >= len(self.shapes))])
            n_gpus = min(len(self.gpus), int(srng.integers(3, 5)))
            gpus = [str(g) for g in srng.choice(self.gpus, n_gpus, replace=False)]
            if srng.random() < HELD_BACK_SHARE * 2.5:
                gpus[-1] = UNPLACEABLE_GPU
            first = int(self.shapes[s][0])
            kernel, config = self.kernels[first], self.configs[first]
            if srng.random() < 0.15 or k >= len(self.shapes):
                config = _FIRST_INT.sub(lambda m: f"{m[1]}{int(m[2]) * 2}{m[3]}", config, 1)
            if s % 12 == 0:  # about one shape in twelve
                kernel = f"dyt_beta={bool(k % 2)}"
            plan.append((s, gpus, kernel, config, srng.random() < 0.25))
        # The block's release: upstream's per-commit files each hold the release of their
        # commit, so the history moves through releases block by block (two per block).
        versions = self._versions(index)
        take: list[np.ndarray] = []
        cols: dict[str, list[str]] = {c: [] for c in ("gpu", "ts", "ver", "kernel", "config", "x")}
        jitter: list[np.ndarray] = []
        t0 = 1_700_000_000 + index * 86_400 * 3
        total, session = 0, 0
        while total < rows:
            s, gpus, kernel, config, wider = plan[session % n_shapes]
            idx = self.shapes[s]
            gpu = gpus[int(rng.integers(len(gpus)))]
            version = versions[int(rng.integers(len(versions)))]
            xs = [self.xs[i] for i in idx]
            if wider and all(x.isdigit() for x in xs):
                xs = [str(int(x) * 2) for x in xs]
            n = len(idx)
            take.append(idx)
            start = t0 + session * 37
            # A sweep point every few seconds: several rows (providers, passes) share a stamp.
            stamps = start + (np.arange(n) // 7) * 3
            cols["ts"] += [str(t) for t in stamps]
            cols["gpu"] += [gpu] * n
            cols["ver"] += [version] * n
            cols["kernel"] += [kernel] * n
            cols["config"] += [config] * n
            cols["x"] += xs
            jitter.append(np.full(n, 1 + rng.normal(0, 0.02)))
            total += n
            session += 1
        out = self.base.take(pa.array(np.concatenate(take)[:rows]))
        ts = pc.cast(pa.array(np.array(cols["ts"][:rows], dtype=np.int64)), pa.timestamp("s"))
        factor = pa.array(np.concatenate(jitter)[:rows])
        replace = {
            "timestamp": pc.strftime(ts, format="%Y-%m-%d %H:%M:%S"),
            "gpu_name": pa.array(cols["gpu"][:rows]),
            "liger_version": pa.array(cols["ver"][:rows]),
            "kernel_name": pa.array(cols["kernel"][:rows]),
            "extra_benchmark_config_str": pa.array(cols["config"][:rows]),
            "x_value": pa.array(cols["x"][:rows]),
        }
        for y in ("y_value_50", "y_value_20", "y_value_80"):
            values = pc.cast(out.column(y), pa.float64(), safe=False)
            replace[y] = pc.cast(pc.multiply(values, factor), pa.string())
        from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS

        return pa.table(
            {c: replace[c] if c in replace else out.column(c) for c in UPSTREAM_COLUMNS}
        )

    def _versions(self, index: int) -> list[str]:
        """Upstream's per-commit files hold their commit's release: a release lasts a few
        blocks (its commits), the next one overlapping its last block."""
        v = (index // BLOCKS_PER_RELEASE) % len(self.versions)
        nxt = self.versions[(v + 1) % len(self.versions)]
        last = index % BLOCKS_PER_RELEASE == BLOCKS_PER_RELEASE - 1
        return [self.versions[v], nxt] if last else [self.versions[v]]

    def blocks(self, rows: int) -> Iterator[pa.Table]:
        i = 0
        while rows > 0:
            n = min(BLOCK, rows)
            yield self.block(i, n)
            rows -= n
            i += 1


def write(path: Path, rows: int, sdist_dir: Path | None = None) -> None:
    from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS

    gen = Generator(real_rows(sdist_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    with pcsv.CSVWriter(
        path,
        pa.schema([(c, pa.string()) for c in UPSTREAM_COLUMNS]),
        write_options=pcsv.WriteOptions(quoting_style="needed"),
    ) as writer:
        for block in gen.blocks(rows):
            writer.write_table(block)


def diversity(path: Path, rows: int = BLOCK) -> dict[str, int]:
    import duckdb

    q = f"""
    SELECT count(DISTINCT (kernel_name, kernel_provider, kernel_operation_mode, metric_name,
                           x_value, extra_benchmark_config_str, gpu_name)) AS combinations,
           count(DISTINCT timestamp) AS timestamps,
           count(DISTINCT (kernel_name, x_name, extra_benchmark_config_str)) AS shapes,
           count(*) FILTER (gpu_name = '{UNPLACEABLE_GPU}' OR kernel_name LIKE '%=%') AS held,
           count(*) AS rows
    FROM (SELECT * FROM read_csv('{path}', all_varchar = true) LIMIT {rows})
    """
    names = ("combinations", "timestamps", "shapes", "held_back_shaped", "rows")
    return dict(zip(names, duckdb.execute(q).fetchall()[0], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=BLOCK)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sdist-dir", default=None)
    args = parser.parse_args()
    out = Path(args.out)
    write(out, args.rows, Path(args.sdist_dir) if args.sdist_dir else None)
    print(json.dumps(diversity(out)))


if __name__ == "__main__":
    main()
