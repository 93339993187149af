"""The device-time protocol's documents and metric names, from catalog/protocols.json's
`deviceTime` entry: shared by the re-run that times points (`gpu.device_time`, on a GPU host)
and the normalizer that makes runs of them (`normalize.descriptors`), which may not import the
re-run's stage.

Stdlib only, and the catalog read by path: a GPU host may have nothing but torch (importing
kindex_etl.catalog needs rfc8785).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

API_VERSION = "kernelindex.dev/v1alpha1"  # contracts.documents.API_VERSION (no pydantic here)


PROTOCOLS_FILE = Path(__file__).parent.parent / "catalog" / "protocols.json"


@cache
def _catalog() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(PROTOCOLS_FILE.read_text("utf-8"))
    return loaded


def spec() -> dict[str, Any]:
    entry: dict[str, Any] = _catalog()["deviceTime"]
    return entry


def protocol_document(
    method: str, mode: str, catalog: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The BenchmarkProtocol of device time by `method` for pass `mode` (`catalog`: the
    protocols.json a normalizer was given, default the packaged one)."""
    cat = catalog or _catalog()
    s = cat["deviceTime"] if catalog else spec()
    mode_info = cat["modes"].get(mode)
    if mode_info is None:
        title, timed = mode or "unspecified", cat["unknown_mode"]["timed"].format(mode=mode)
    else:
        title, timed = mode_info["title"], mode_info["timed"]
    m = s["methods"][method]
    slug = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")
    return {
        "apiVersion": API_VERSION,
        "kind": "BenchmarkProtocol",
        "metadata": {
            "name": s["name"].format(method=method.replace("_", "-"), mode=slug),
            "title": s["title"].format(method=method.replace("_", " "), mode=title),
        },
        "spec": {
            "harness": s["harness"],
            "measurement": {"timer": m["timer"], "primaryStatistic": "median"},
            "comparability": {
                "notes": m["notes"].format(timed=timed, **s["parameters"]),
                "family": s["family"],
            },
        },
    }


def metric_name(method: str, version: int | None = None) -> str:
    """The CSV metric_name of device time by `method` under protocol `version` (the catalog's)."""
    s = spec()
    return str(s["metricName"]).format(
        method=method, version=s["version"] if version is None else version
    )


def metric_methods(catalog: Mapping[str, Any] | None = None) -> dict[str, str]:
    """metric_name -> method, for every method of the catalog's protocol version: the device
    metrics a normalizer knows. Another version's names are not here (held back, not guessed)."""
    s = (catalog or _catalog())["deviceTime"]
    return {str(s["metricName"]).format(method=m, version=s["version"]): m for m in s["methods"]}


def host_bound(
    upstream_ms: float | None, device_ms: float | None, factor: float | None = None
) -> tuple[float | None, bool]:
    """(upstream / device rounded to 4 places, whether upstream's figure is mostly the host's:
    the ratio at least `factor`, default the catalog's hostBoundFactor). No ratio where a
    figure is missing, not finite or not positive: then not host-bound."""
    if upstream_ms is None or device_ms is None:
        return None, False
    if not (math.isfinite(upstream_ms) and math.isfinite(device_ms)):
        return None, False
    if upstream_ms <= 0 or device_ms <= 0:
        return None, False
    ratio = upstream_ms / device_ms
    limit = float(spec()["hostBoundFactor"]) if factor is None else factor
    return round(ratio, 4), ratio >= limit
