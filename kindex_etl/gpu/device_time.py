"""The device-time protocol of our re-runs: its documents, its digests, and each run's figures.

Upstream's timer (`triton.testing.do_bench` around a Python closure) measures the host on our
H200 as much as the GPU. With `--device-time` each script runs under `device_launch.py`, which
keeps upstream's timer as shipped (the CSV stays comparable with upstream's data) and times the
same callable again by device time. The protocol (what is timed, how, how many replays) is the
`deviceTime` entry of `catalog/protocols.json` (its documents and metric names:
`contracts.device_protocol`, re-exported here); its documents are their own family
(`kindex_device_time`), one per (method, pass), so a device-time series has its own protocol
digest and never shares a series with an upstream-timer one.

Stdlib only: `finish` runs on the GPU host, which may have nothing but torch. The digest is
sha256 over canonical JSON of {apiVersion, kind, spec} as `contracts.digests.digest` computes
it (RFC 8785; for documents of strings and integers only, which these are, that is JSON with
sorted keys and no spaces: tests/gpu/test_device_time.py checks the two agree).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kindex_etl.contracts.device_protocol import (  # noqa: F401 (this module's names)
    API_VERSION,
    PROTOCOLS_FILE,
    host_bound,
    metric_methods,
    metric_name,
    protocol_document,
    spec,
)
from kindex_etl.contracts.upstream import (
    DEVICE_TIME_COLUMNS,
    GPU_STATE_COLUMNS,
    POINT_COLUMNS,
    UPSTREAM_COLUMNS,
)

PROTOCOL_ENV = "KINDEX_DEVICE_PROTOCOL"
OUT_ENV = "KINDEX_DEVICE_TIME_OUT"
LAUNCHER = Path(__file__).with_name("device_launch.py")
RESULT_FILE = "device_time.json"
CSV_FILE = "device_time.csv"  # the points as runs for the ingest (`csv_rows`)


def launcher_parameters() -> dict[str, Any]:
    """What `device_launch.py` reads from KINDEX_DEVICE_PROTOCOL: counts and method per pass."""
    s = spec()
    return {**s["parameters"], "methodByMode": s["methodByMode"], "version": s["version"]}


def method_for(mode: str) -> str:
    by_mode: dict[str, str] = spec()["methodByMode"]
    return by_mode.get(mode, by_mode["*"])


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(doc: Mapping[str, Any]) -> str:
    hashed = {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "spec": doc["spec"]}
    return "sha256:" + hashlib.sha256(canonical(hashed)).hexdigest()


def child_env(env: dict[str, str], out: Path) -> dict[str, str]:
    """`env` for a script run under the launcher, its records going to `out` (JSON lines)."""
    return {**env, PROTOCOL_ENV: json.dumps(launcher_parameters()), OUT_ENV: str(out)}


def command(python: str, script: str, args: Iterable[str]) -> list[str]:
    return [python, str(LAUNCHER), script, *args]


def point_record(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """One launcher line as a run's point: protocol digest and the host-bound flag added.

    A line with no point (a do_bench outside upstream's run_benchmarks) or no device figure
    (the device timer failed; its error is kept) is kept with `protocolDigest` null, so it can
    never join a series."""
    device = dict(raw.get("device") or {})
    point = raw.get("point")
    method = device.get("method")
    mode = (point or {}).get("kernel_operation_mode") or ""
    upstream = dict(raw.get("upstream") or {})
    ratio, bound = host_bound(upstream.get("p50_ms"), device.get("p50_ms"))
    protocol = digest(protocol_document(method, mode)) if point and method else None
    return {
        "script": raw.get("script"),
        "point": point,
        "call": raw.get("call", 0),
        "upstream": upstream,
        "device": device,
        "protocolDigest": protocol,
        "upstreamOverDevice": ratio,
        "hostBound": bound,
    }


def collect(lines: Iterable[str]) -> dict[str, Any]:
    """A run's device_time.json from its scripts' launcher lines."""
    points = [point_record(json.loads(line)) for line in lines if line.strip()]
    kept = [p for p in points if p is not None]
    protocols: dict[str, Any] = {}
    for p in kept:
        if p["protocolDigest"]:
            mode = p["point"]["kernel_operation_mode"] or ""
            protocols[p["protocolDigest"]] = protocol_document(p["device"]["method"], mode)
    s = spec()
    return {
        "family": s["family"],
        "protocolVersion": s["version"],
        "hostBoundFactor": s["hostBoundFactor"],
        "protocols": protocols,
        "points": kept,
        "hostBoundPoints": sum(1 for p in kept if p["hostBound"]),
        "failedPoints": sum(1 for p in kept if not p["protocolDigest"]),
    }


def write_run(folder: Path, parts: Path) -> dict[str, Any] | None:
    """Gather `parts/*.jsonl` into `folder/device_time.json`; None when no script wrote any."""
    files = sorted(parts.glob("*.jsonl")) if parts.is_dir() else []
    if not files:
        return None
    lines: list[str] = []
    for f in files:
        lines += f.read_text("utf-8").splitlines()
    result = collect(lines)
    (folder / RESULT_FILE).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return result


def manifest_entry(folder: Path) -> dict[str, Any]:
    """run.json's `deviceTime` where the run was also timed by device time, else nothing."""
    path = folder / RESULT_FILE
    if not path.is_file():
        return {}
    data = json.loads(path.read_text("utf-8"))
    keys = ("family", "protocolVersion", "hostBoundPoints", "failedPoints")
    return {
        "deviceTime": {
            "file": RESULT_FILE,
            "points": len(data["points"]),
            "protocols": sorted(data["protocols"]),
            **{k: data[k] for k in keys},
        }
    }


def _same(recorded: Any, text: str | None) -> bool:
    """Whether a launcher's float is the CSV's text of it (NaN equals nothing: no twin)."""
    try:
        return recorded is not None and float(recorded) == float(text or "nan")
    except (TypeError, ValueError):
        return False


def _metric_of(p: Mapping[str, Any], file_version: int) -> str | None:
    """The metric_name a timed point's row carries: today's version where the point's digest is
    today's document's, else its file's version, which no normalizer of this catalog knows (the
    row is held back, never given today's digest); None where the two cannot be told apart."""
    method, mode = p["device"]["method"], p["point"]["kernel_operation_mode"] or ""
    if p["protocolDigest"] == digest(protocol_document(method, mode)):
        return metric_name(method)
    if file_version != spec()["version"]:
        return metric_name(method, file_version)
    return None


def csv_rows(rows: Sequence[Mapping[str, str]], data: Mapping[str, Any]) -> list[dict[str, str]]:
    """A run's device-time points as rows of the ingest: upstream's columns, then
    DEVICE_TIME_COLUMNS.

    Each row is the twin of one upstream-timer speed row of the run's benchmark.csv (`rows`):
    the same point, GPU, timestamp and release, with the device figures as its y values and
    the device-time metric name of its method and protocol version (`metric_name`). The twin
    is the point's do_bench call whose upstream figures are the row's (the last such call: an
    autotuner's calls at one point come before the measurement, dyt's 18 in the fixture).
    Points the device timer could not time (no protocol digest) are no rows: no device-time
    measurement exists for them; device_time.json keeps their error and run.json counts them.
    """
    calls: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for p in data.get("points", []):
        if p.get("point") and p.get("protocolDigest") and p.get("device", {}).get("method"):
            key = tuple(str(p["point"].get(c, "")) for c in POINT_COLUMNS)
            calls.setdefault(key, []).append(p)
    file_version = int(data.get("protocolVersion", spec()["version"]))
    unit = str(spec()["unit"])
    out = []
    for row in rows:
        if row.get("metric_name") != "speed":
            continue
        key = tuple(row.get(c, "") or "" for c in POINT_COLUMNS)
        twins = [
            p
            for p in calls.get(key, [])
            if _same(p["upstream"].get("p50_ms"), row.get("y_value_50"))
        ]
        if not twins:
            continue
        p = max(twins, key=lambda t: int(t.get("call", 0)))
        name = _metric_of(p, file_version)
        if name is None:
            continue
        device = p["device"]
        out.append(
            {
                **{c: row.get(c, "") or "" for c in UPSTREAM_COLUMNS},
                "metric_name": name,
                "metric_unit": unit,
                **{f"y_value_{q}": _text(device.get(f"p{q}_ms")) for q in ("50", "20", "80")},
                "upstream_y_value_50": row.get("y_value_50", "") or "",
                **gpu_columns(device),
            }
        )
    return out


def gpu_columns(device: Mapping[str, Any]) -> dict[str, str]:
    """A point's GPU state as the CSV's GPU_STATE_COLUMNS (text; empty where unknown).

    Clocks, power and temperature are the `busy` reading (taken while the timed batches ran);
    the throttle reasons are the bits set in any of `before`, `busy` and `after`, and
    `gpu_throttled` is the launcher's own mark (`device.throttled`: a slowdown reason in any
    of the three). A point recorded without NVML (no `gpu`) has every column empty."""
    states = device.get("gpu") or {}
    busy = states.get("busy") or {}
    reasons = [
        s["throttleReasons"]
        for s in (states.get(m) for m in ("before", "busy", "after"))
        if isinstance(s, Mapping) and isinstance(s.get("throttleReasons"), int)
    ]
    mask = 0
    for r in reasons:
        mask |= r
    throttled = device.get("throttled")
    values = (
        _number(busy.get("smClockMHz")),
        _number(busy.get("memClockMHz")),
        _number(busy.get("powerW")),
        _number(busy.get("temperatureC")),
        str(mask) if reasons else "",
        ("true" if throttled else "false") if isinstance(throttled, bool) else "",
    )
    return dict(zip(GPU_STATE_COLUMNS, values, strict=True))


def _number(value: Any) -> str:
    """An NVML reading as text: integers as integers, floats as Python writes them."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return ""
    return str(value) if isinstance(value, int) else repr(float(value))


def _text(value: Any) -> str:
    """A figure as upstream writes one (Python's float text; nan where there is none)."""
    return repr(float(value)) if isinstance(value, int | float) else "nan"


def to_csv(rows: Iterable[Mapping[str, str]]) -> bytes:
    buf = io.StringIO()
    columns = [*UPSTREAM_COLUMNS, *DEVICE_TIME_COLUMNS]
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in columns})
    return buf.getvalue().encode("utf-8")


def write_csv(folder: Path) -> int | None:
    """`folder/device_time.csv` from the run's benchmark.csv and device_time.json: its row
    count, None where the run was not timed by device time (or wrote no rows: no file)."""
    result, table = folder / RESULT_FILE, folder / "benchmark.csv"
    if not result.is_file() or not table.is_file():
        return None
    rows = list(csv.DictReader(io.StringIO(table.read_text("utf-8"))))
    device_rows = csv_rows(rows, json.loads(result.read_text("utf-8")))
    if not device_rows:
        return None
    (folder / CSV_FILE).write_bytes(to_csv(device_rows))
    return len(device_rows)
