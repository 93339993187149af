"""The `regressions` table and the `PerformanceChange` document: one row per change and state.

Rows are appended, never rewritten: an analysis writes a row for a change it sees for the first
time and again when its state moves (`pending` -> `alert` once the change persisted). The
current state of a change is its row with the highest `warehouse_seq`.

States: `alert` (slower or larger), `improvement`, `pending` (seen at the newest point only),
and two that are never alerts: `environment` (the other providers measured in the same runs
moved with it, or many kernels moved at the same commit) and `harness` (the step lies across a
revision of the benchmark script or the reference code it times).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

API_VERSION = "kernelindex.dev/v1alpha1"
KIND = "PerformanceChange"

REGRESSIONS_SCHEMA = pa.schema(
    [
        ("change_id", pa.string()),
        ("series_key", pa.string()),
        ("series_class", pa.string()),
        ("kernel", pa.string()),
        ("operation_mode", pa.string()),
        ("metric", pa.string()),
        ("provider", pa.string()),
        ("workload_digest", pa.string()),
        ("workload_slug", pa.string()),
        ("x_value", pa.string()),
        ("protocol_digest", pa.string()),
        ("gpu_product", pa.string()),
        ("gpu_form_factor", pa.string()),
        ("gpu_name", pa.string()),
        ("software_class", pa.string()),
        ("before_release", pa.string()),
        ("after_release", pa.string()),
        ("before_releases", pa.int32()),
        ("after_releases", pa.int32()),
        ("before_runs", pa.int32()),
        ("after_runs", pa.int32()),
        ("before_run_ids", pa.list_(pa.string())),
        ("after_run_ids", pa.list_(pa.string())),
        ("before_value", pa.float64()),
        ("after_value", pa.float64()),
        ("value_unit", pa.string()),
        ("ratio", pa.float64()),
        ("ratio_low", pa.float64()),
        ("ratio_high", pa.float64()),
        ("p_value", pa.float64()),
        ("score", pa.float64()),
        ("noise", pa.float64()),
        ("direction", pa.string()),
        ("state", pa.string()),
        ("false_alarm_rate", pa.float64()),
        ("detector", pa.string()),
        ("warehouse_seq", pa.int64()),
        # Where the change is in upstream's history: the last commit measured before it and
        # the first after (with their positions), the release that first shipped the after
        # commit (null: none yet), and the series' origin (`ci`, `contributed`, `rerun`).
        ("origin", pa.string()),
        ("before_commit", pa.string()),
        ("after_commit", pa.string()),
        ("before_position", pa.int64()),
        ("after_position", pa.int64()),
        ("first_release", pa.string()),
        # The benchmark's harness revision in force on each side (a step between two is
        # state `harness`), the other providers' ratio over the same step (geometric mean;
        # their names) and this series' ratio relative to it (`environment` when only that
        # is within the minimum effect), and how many kernels stepped the same way at the
        # same commit on the same kind of machine.
        ("before_harness", pa.string()),
        ("after_harness", pa.string()),
        ("baseline_ratio", pa.float64()),
        ("baseline_providers", pa.list_(pa.string())),
        ("relative_ratio", pa.float64()),
        ("kernels_at_step", pa.int32()),
    ]
)


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def change_document(row: dict[str, Any]) -> dict[str, Any]:
    """A change as a `kernelindex.dev/v1alpha1` document (spec keys in camelCase)."""
    name = "-".join(
        str(row[k] or "").lower().replace("_", "-").replace(" ", "-")
        for k in ("kernel", "operation_mode", "provider", "metric", "after_release")
    )
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": f"change-{name}"[:100], "changeId": row["change_id"]},
        "spec": {_camel(k): row[k] for k in REGRESSIONS_SCHEMA.names if k != "change_id"},
    }
