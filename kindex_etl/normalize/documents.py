"""BenchmarkRun documents as JSON lines, assembled in Arrow from per-descriptor fragments.

A run's document is two constant pieces per descriptor (rendered once, when the descriptor is
first seen) joined with the row's own values: one pass over the output bytes per batch, and the
lines of a batch end up in one contiguous buffer that is written as is. Tests hold every line
equal to the models' own rendering (`normalize/reference.py`).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.normalize.descriptors import Descriptor

# What json.dumps(text, ensure_ascii=False) returns for a str, without its Python wrapper.
json_str = json.encoder.encode_basestring


@lru_cache(maxsize=4096)
def _head(title: str, labels: tuple[tuple[str, str], ...]) -> str:
    # Shared by every descriptor of a (kernel, provider, pass, metric, release): x and config
    # differ, title and labels do not.
    text = json.dumps(dict(labels), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return (
        '{"apiVersion":"kernelindex.dev/v1alpha1","kind":"BenchmarkRun","metadata":{"labels":'
        f'{text},"title":{json_str(title)},"name":"'
    )


def head_of(title: str, labels: dict[str, str]) -> str:
    """A run document's text before its name: its labels and title (the same for every
    descriptor of a shared part whose workloads agree on matching a catalog variant)."""
    return _head(title, tuple(labels.items()))


def fragments(d: Descriptor) -> tuple[str, str]:
    """The constant JSON text of a run: before its name, and between name and timestamp.

    Keys are ordered so that everything a descriptor fixes comes first: a row then needs two
    per-descriptor pieces, and the rest of its document is its own values.
    """
    head = head_of(d.title, d.labels)
    series = json_str(d.series_id)[:-1]  # an open string: the timestamp slug closes it
    middle = (
        f'"}},"spec":{{"environmentDigest":"{d.environment_digest}",'
        f'"implementationDigest":"{d.implementation_digest}",'
        f'"protocolDigest":"{d.protocol_digest}","workloadDigest":"{d.workload_digest}",'
        f'"sourceNative":{{"benchmark":{json_str(d.benchmark)},"source":"liger-kernel-bench",'
        f'"externalId":{series}/'
    )
    return head, middle


# A device-time row's GPU_STATE_COLUMNS -> the key of `sourceNative.deviceTime.gpu` (the
# names device_time.json's states use), and the runs column's Python type.
GPU_NATIVE = {
    "gpu_sm_clock_mhz": ("smClockMHz", int),
    "gpu_mem_clock_mhz": ("memClockMHz", int),
    "gpu_power_w": ("powerW", float),
    "gpu_temperature_c": ("temperatureC", int),
    "gpu_throttle_reasons": ("throttleReasons", int),
    "gpu_throttled": ("throttled", bool),
}


def gpu_value(column: str, text: str | None) -> int | float | bool | None:
    """One GPU_STATE_COLUMNS field of a device-time CSV row as its runs column holds it: None
    where it is empty or not what the column holds (the state says something about a run,
    never whether the row is one). Both normalizers read the fields through this."""
    kind = GPU_NATIVE[column][1]
    text = (text or "").strip()
    if kind is bool:
        return {"true": True, "false": False}.get(text.lower())
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    if kind is int:
        return int(value) if value.is_integer() and abs(value) < 2**63 else None
    return value


def device_native(
    upstream_p50: float | None,
    over: float | None,
    host_bound: bool,
    gpu: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A device-time run's `sourceNative.deviceTime`: whether the point is host-bound, and
    upstream's timer's median of it in the same run with its ratio to device time, where known
    (a reader finds host-bound points by it; the runs table has the same as columns). `gpu`
    (GPU_STATE_COLUMNS -> value) adds the GPU's state as `gpu`, its known fields only, and
    only where one is known: a run recorded without it keeps the document it had."""
    out: dict[str, Any] = {}
    state = {GPU_NATIVE[c][0]: v for c, v in (gpu or {}).items() if v is not None}
    if state:
        out["gpu"] = dict(sorted(state.items()))
    out["hostBound"] = host_bound
    if over is not None:
        out["upstreamOverDevice"] = over
    if upstream_p50 is not None:
        out["upstreamP50Ms"] = upstream_p50
    return out


def _shape_pieces() -> list[pa.Array]:
    """The constant text between a document's row values, per row shape.

    A row's shape (`_shape`) is whether it is a speed row and which of p20, p50, p80 are
    finite: together they fix every piece of a document that is neither a descriptor fragment
    nor one of the row's own values. Piece i of shape s is element s of the i-th array.
    """
    pieces: list[list[str]] = [[] for _ in range(8)]
    for shape in range(16):
        speed, f20, f50, f80 = (bool(shape & bit) for bit in (8, 4, 2, 1))
        unit = "ms" if speed else "mb"

        def opening(q: str, *, speed: bool = speed) -> str:
            metric, unit = ("latency", "ns") if speed else ("peak_memory", "bytes")
            return f'{{"metric":"{metric}","statistic":"p{q}","unit":"{unit}","value":'

        status = "passed" if f20 and f50 and f80 else "failed"
        median = (
            ',"timing":{"latencyNs":{"median":' if speed else ',"memory":{"peakBytes":{"median":'
        )
        texts = (
            f'","metrics":{{"{unit}_20":',
            f',"{unit}_50":',
            f',"{unit}_80":',
            # sourceNative's own keys (`native`, device-time runs) come between its two braces.
            '},"measurements":[' + (opening("20") if f20 else ""),
            ("}" if f20 else "") + ("," if f20 and f80 else "") + (opening("80") if f80 else ""),
            ("}" if f80 else "") + '],"observedAt":"',
            f'","status":"{status}"' + (median if f50 else ""),
            ('},"primaryStatistic":"median"}' if f50 else "") + "}}\n",
        )
        for i, text in enumerate(texts):
            pieces[i].append(text)
    return [pa.array(p, pa.string()) for p in pieces]


_PIECES = _shape_pieces()


def _shape(is_speed: pa.Array, finite: dict[str, pa.Array]) -> pa.Array:
    bits = [is_speed, finite["20"], finite["50"], finite["80"]]
    code = np.zeros(len(is_speed), dtype=np.int8)
    for weight, mask in zip((8, 4, 2, 1), bits, strict=True):
        code += np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.int8) * np.int8(weight)
    return pa.array(code, pa.int8())


def run_documents(
    cols: dict[str, pa.Array],
    take: pa.Array,
    is_speed: pa.Array,
    names: pa.Array,
    observed: pa.Array,
    ts_slug: pa.Array,
    raw: dict[str, pa.Array],
    finite: dict[str, pa.Array],
    scaled: dict[str, pa.Array],
    native: pa.Array,
) -> pa.Array:
    """One BenchmarkRun document per row, ending in a newline.

    A single join of two per-descriptor fragments, per-row values, and the constant pieces of
    the row's shape: one pass over the output bytes. Keys come in a fixed order (descriptor-
    fixed ones first), the same for every document.
    """
    shape = _shape(is_speed, finite)
    piece = [p.take(shape) for p in _PIECES]

    def numbers(q: str) -> pa.Array:
        # Arrow writes the shortest text that reads back as the same double: JSON-valid.
        return pc.if_else(finite[q], pc.cast(raw[q], pa.string()), "null")

    # Empty where the point is missing: a scaled value is null exactly where it is not finite.
    integer = {q: pc.fill_null(pc.cast(scaled[q], pa.string()), "") for q in scaled}
    return pc.binary_join_element_wise(
        cols["frag_head"].take(take),
        names,
        cols["frag_middle"].take(take),
        ts_slug,
        piece[0], numbers("20"),
        piece[1], numbers("50"),
        piece[2], numbers("80"),
        "}", native,
        piece[3], integer["20"],
        piece[4], integer["80"],
        piece[5], observed,
        piece[6], integer["50"],
        piece[7],
        "",
    )  # fmt: skip
