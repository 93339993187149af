"""The device-time protocol of our re-runs: its documents, its digests, and each run's figures.

Upstream's timer (`triton.testing.do_bench` around a Python closure) measures the host on our
H200 as much as the GPU. With `--device-time` each script runs under `device_launch.py`, which
keeps upstream's timer as shipped (the CSV stays comparable with upstream's data) and times the
same callable again by device time. The protocol (what is timed, how, how many replays) is the
`deviceTime` entry of `catalog/protocols.json`; its documents are their own family
(`kindex_device_time`), one per (method, pass), so a device-time series has its own protocol
digest and never shares a series with an upstream-timer one.

Stdlib only: `finish` runs on the GPU host, which may have nothing but torch. The digest is
sha256 over canonical JSON of {apiVersion, kind, spec} as `contracts.digests.digest` computes
it (RFC 8785; for documents of strings and integers only, which these are, that is JSON with
sorted keys and no spaces: tests/gpu/test_device_time.py checks the two agree).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

PROTOCOL_ENV = "KINDEX_DEVICE_PROTOCOL"
OUT_ENV = "KINDEX_DEVICE_TIME_OUT"
LAUNCHER = Path(__file__).with_name("device_launch.py")
RESULT_FILE = "device_time.json"
API_VERSION = "kernelindex.dev/v1alpha1"  # contracts.documents.API_VERSION (no pydantic here)


# By path: importing kindex_etl.catalog needs rfc8785, which a GPU host may not have.
PROTOCOLS_FILE = Path(__file__).parent.parent / "catalog" / "protocols.json"


@cache
def _catalog() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(PROTOCOLS_FILE.read_text("utf-8"))
    return loaded


def spec() -> dict[str, Any]:
    entry: dict[str, Any] = _catalog()["deviceTime"]
    return entry


def launcher_parameters() -> dict[str, Any]:
    """What `device_launch.py` reads from KINDEX_DEVICE_PROTOCOL: counts and method per pass."""
    s = spec()
    return {**s["parameters"], "methodByMode": s["methodByMode"], "version": s["version"]}


def method_for(mode: str) -> str:
    by_mode: dict[str, str] = spec()["methodByMode"]
    return by_mode.get(mode, by_mode["*"])


def protocol_document(method: str, mode: str) -> dict[str, Any]:
    """The BenchmarkProtocol of device time by `method` for pass `mode`."""
    s, cat = spec(), _catalog()
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


def host_bound(upstream_ms: float | None, device_ms: float | None) -> tuple[float | None, bool]:
    """(upstream / device, whether upstream's figure is mostly the host's)."""
    if not upstream_ms or not device_ms or upstream_ms <= 0 or device_ms <= 0:
        return None, False
    ratio = upstream_ms / device_ms
    return round(ratio, 4), ratio >= float(spec()["hostBoundFactor"])


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
