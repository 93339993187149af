"""Record a GPU re-run request, exactly once per version (placeholder, extended in issue 5)."""

from __future__ import annotations

import json
from typing import Any

from packaging.version import Version

from ..load import layout
from ..load.commit import Warehouse, utcnow
from ..storage import PreconditionFailed


def on_new_versions(
    warehouse: Warehouse, versions_before: set[str], new_versions: list[str]
) -> list[dict[str, Any]]:
    if not versions_before:
        return []
    newest = max(Version(v) for v in versions_before)
    out = []
    for version in new_versions:
        if Version(version) <= newest:
            continue
        request = {"version": version, "requestedAt": utcnow(), "reason": "new liger_version"}
        try:
            warehouse.store.put_bytes(
                f"{layout.RERUNS}{version}.json", json.dumps(request).encode(), if_none_match=True
            )
        except PreconditionFailed:
            continue
        out.append(request)
    return out
