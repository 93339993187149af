"""Property: arbitrary rows mixed into real sample files never fail the run, and every object's
counts add up (`rows == runs + duplicates + quarantined`)."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kindex_etl import IngestOptions, ingest
from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from tests.helpers import SAMPLE_CSV, seed_row

# Any text a CSV file can hold as UTF-8 (lone surrogates cannot be encoded at all).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
NUMBERS = st.sampled_from(
    ["nan", "inf", "-inf", "-1", "1e308", "9e15", "0", "1e-320", "2**53", "9007199254740993"]
) | st.floats(allow_nan=True, allow_infinity=True).map(repr)
CONFIGS = JSON_VALUES.map(lambda v: json.dumps(v, allow_nan=True)) | TEXT


def _field(name: str) -> st.SearchStrategy[str]:
    seed = seed_row()[name]
    choices = [st.just(seed), TEXT]
    if name.startswith("y_value") or name == "x_value":
        choices.append(NUMBERS)
    if name == "extra_benchmark_config_str":
        choices.append(CONFIGS)
    if name == "liger_version":
        choices.append(st.sampled_from(["0.8.0\t", " 0.8.0 ", "v1", "1!2.0", "0.8.0+local"]))
    return st.one_of(*choices)


ROWS = st.lists(
    st.fixed_dictionaries({name: _field(name) for name in UPSTREAM_COLUMNS}), max_size=8
)


def _sample_rows(n: int) -> list[dict[str, str]]:
    with SAMPLE_CSV.open(newline="") as fh:
        return [r for _, r in zip(range(n), csv.DictReader(fh), strict=False)]


def _csv(rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=list(UPSTREAM_COLUMNS))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


# pyarrow cannot decode a non-UTF-8 malformed row for the handler and says so on stderr
# before failing the parse; that object is then rejected as bad_encoding.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    hostile=ROWS,
    positions=st.lists(st.integers(0, 30), max_size=8),
    tail=st.binary(max_size=300),
)
def test_arbitrary_rows_never_fail_the_run_and_counts_add_up(hostile, positions, tail):
    sample = _sample_rows(30)
    mixed = list(sample)
    for i, r in enumerate(hostile):
        mixed.insert(positions[i] if i < len(positions) else len(mixed), r)
    with tempfile.TemporaryDirectory(prefix="kindex-prop-") as root:
        up = Path(root) / "up"
        (up / "benchmarks" / "mixed").mkdir(parents=True)
        (up / "benchmarks" / "bytes").mkdir(parents=True)
        (up / "a_clean.csv").write_bytes(_csv(sample))
        (up / "benchmarks" / "mixed" / "benchmark.csv").write_bytes(_csv(mixed))
        # Any bytes in a file: after a real header and rows, anything at all.
        (up / "benchmarks" / "bytes" / "benchmark.csv").write_bytes(_csv(sample[:3]) + tail)
        summary = ingest(str(up), str(Path(root) / "wh"), IngestOptions(trigger=False))
    by_key = {r.key: r for r in summary.objects}
    for r in summary.objects:
        assert r.rows == r.runs + r.duplicates + r.quarantined, r
    assert sum(summary.quarantined_by_reason.values()) == summary.quarantined_rows
    clean = by_key["a_clean.csv"]
    assert (clean.status, clean.runs, clean.quarantined) == ("ingested", len(sample), 0)
    mixed_report = by_key["benchmarks/mixed/benchmark.csv"]
    if mixed_report.status == "ingested":
        # Every record is counted once; a row of only empty fields is a blank line, not a row.
        blank = sum(1 for r in hostile if not any(r.values()))
        assert mixed_report.rows == len(mixed) - blank
        # The sample's rows are the clean file's again: duplicates, never lost.
        assert mixed_report.duplicates >= len(sample) - len(hostile)
