"""The `regressions` table and the `PerformanceChange` document: one row per change and state.

Rows are appended, never rewritten: an analysis writes a row for a change it sees for the first
time and again when its state moves (`pending` -> `alert` once the change persisted). The
current state of a change is its row with the highest `warehouse_seq` (the commit analysed)
and, of two analyses of one commit, the highest `written_seq` (the commit that wrote it).

States: `alert` (slower or larger), `improvement`, `pending` (seen at the newest point only),
and two that are never alerts: `environment` (the other providers measured in the same runs
moved with it, or many kernels moved at the same commit) and `harness` (the step lies across a
revision of the benchmark script or the reference code it times). And `retracted`: an
analysis that looked at the change's series no longer finds it (a detector revision, a
reprocess, more runs at the same commits); the row repeats the change's last row otherwise.
"""

from __future__ import annotations

import re
from typing import Any

from kindex_etl.contracts.tables import REGRESSIONS_SCHEMA

__all__ = ["REGRESSIONS_SCHEMA", "RETRACTED", "change_document"]

RETRACTED = "retracted"
API_VERSION = "kernelindex.dev/v1alpha1"
KIND = "PerformanceChange"


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


# (column, spec key) once: converted per change and column, the names took 2.4 of the 5.7 s
# that committing 17,554 changes took (profiled).
_SPEC_KEYS = tuple((k, _camel(k)) for k in REGRESSIONS_SCHEMA.names if k != "change_id")


def change_document(row: dict[str, Any]) -> dict[str, Any]:
    """A change as a `kernelindex.dev/v1alpha1` document (spec keys in camelCase)."""
    name = "-".join(
        str(row[k] or "").lower().replace("_", "-").replace(" ", "-")
        for k in ("kernel", "operation_mode", "provider", "metric", "after_release")
    )
    whole = {"retracted_state": None, **row}  # only a retraction's row names one
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": f"change-{name}"[:100], "changeId": row["change_id"]},
        "spec": {camel: whole[k] for k, camel in _SPEC_KEYS},
    }
