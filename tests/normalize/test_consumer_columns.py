"""Columns for consumers: numeric x, a sortable release key, values in unit-named columns."""

from __future__ import annotations

import duckdb

from kindex_etl import ingest
from tests.helpers import row, table, write_csv


def test_typed_columns_read_back_with_duckdb(tmp_path):
    rows = [
        row(x_value="16384", liger_version="0.5.10"),
        row(x_value="2048", liger_version="0.5.8"),
        row(x_value="llama", liger_version="0.5.8", timestamp="2026-06-10 21:03:43"),
        row(metric_name="memory", metric_unit="MB", y_value_50="2.5", y_value_20="2",
            y_value_80="3", liger_version="0.5.8"),
    ]  # fmt: skip
    write_csv(tmp_path / "up" / "a.csv", rows)
    ingest(str(tmp_path / "up"), str(tmp_path / "wh"))
    runs = table(tmp_path / "wh", "benchmark_runs")
    assert runs.num_rows == 4
    con = duckdb.connect()
    con.register("runs", runs)
    xs = con.sql(
        "SELECT x_value, x_value_number FROM runs WHERE metric = 'speed' ORDER BY x_value_number"
    ).fetchall()
    assert xs == [("2048", 2048.0), ("16384", 16384.0), ("llama", None)]
    newest = con.execute("SELECT liger_version FROM runs ORDER BY release_key DESC LIMIT 1")
    assert newest.fetchall() == [("0.5.10",)]
    speed = con.execute(
        "SELECT latency_ns_median, value_median, peak_memory_bytes_median FROM runs "
        "WHERE metric = 'speed' AND x_value = '2048'"
    ).fetchall()[0]
    assert speed == (108640, 108640, None)
    memory = con.execute(
        "SELECT peak_memory_bytes_median, peak_memory_bytes_p20, peak_memory_bytes_p80, "
        "latency_ns_median FROM runs WHERE metric = 'memory'"
    ).fetchall()[0]
    assert memory == (int(2.5 * 2**20), 2 * 2**20, 3 * 2**20, None)
    assert str(runs.schema.field("observed_at").type) == "timestamp[ms, tz=UTC]"
