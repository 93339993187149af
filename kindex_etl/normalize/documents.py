"""BenchmarkRun documents as JSON lines, assembled in Arrow from per-descriptor fragments.

A run's document is two constant pieces per descriptor (rendered once, when the descriptor is
first seen) joined with the row's own values: one pass over the output bytes per batch, and the
lines of a batch end up in one contiguous buffer that is written as is. Tests hold every line
equal to the models' own rendering (`normalize/reference.py`).
"""

from __future__ import annotations

import json
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.normalize.descriptors import Descriptor

# What json.dumps(text, ensure_ascii=False) returns for a str, without its Python wrapper.
_json_str = json.encoder.encode_basestring


@lru_cache(maxsize=4096)
def _head(title: str, labels: tuple[tuple[str, str], ...]) -> str:
    # Shared by every descriptor of a (kernel, provider, pass, metric, release): x and config
    # differ, title and labels do not.
    text = json.dumps(dict(labels), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return (
        '{"apiVersion":"kernelindex.dev/v1alpha1","kind":"BenchmarkRun","metadata":{"labels":'
        f'{text},"title":{_json_str(title)},"name":"'
    )


def fragments(d: Descriptor) -> tuple[str, str]:
    """The constant JSON text of a run: before its name, and between name and timestamp.

    Keys are ordered so that everything a descriptor fixes comes first: a row then needs two
    per-descriptor pieces, and the rest of its document is its own values.
    """
    head = _head(d.title, tuple(d.labels.items()))
    series = _json_str(d.series_id)[:-1]  # an open string: the timestamp slug closes it
    middle = (
        f'"}},"spec":{{"environmentDigest":"{d.environment_digest}",'
        f'"implementationDigest":"{d.implementation_digest}",'
        f'"protocolDigest":"{d.protocol_digest}","workloadDigest":"{d.workload_digest}",'
        f'"sourceNative":{{"benchmark":{_json_str(d.benchmark)},"source":"liger-kernel-bench",'
        f'"externalId":{series}/'
    )
    return head, middle


def run_documents(
    cols: dict[str, pa.Array],
    take: pa.Array,
    is_speed: pa.Array,
    names: pa.Array,
    observed: pa.Array,
    ts_slug: pa.Array,
    status: pa.Array,
    raw: dict[str, pa.Array],
    finite: dict[str, pa.Array],
    scaled: dict[str, pa.Array],
) -> pa.Array:
    """One BenchmarkRun document per row, ending in a newline.

    A single join of two per-descriptor fragments, per-row values, and pieces that are empty
    where a point is missing: one pass over the output bytes. Keys come in a fixed order
    (descriptor-fixed ones first), the same for every document.
    """
    is_memory = pc.invert(is_speed)
    has_median = finite["50"]

    def when(mask: pa.Array, text: str) -> pa.Array:
        return pc.if_else(mask, text, "")

    def numbers(q: str) -> pa.Array:
        # Arrow writes the shortest text that reads back as the same double: JSON-valid.
        return pc.if_else(finite[q], pc.cast(raw[q], pa.string()), "null")

    integer = {q: pc.fill_null(pc.cast(scaled[q], pa.string()), "") for q in scaled}
    opening = {
        q: pc.if_else(
            finite[q],
            pc.if_else(
                is_speed,
                f'{{"metric":"latency","statistic":"p{q}","unit":"ns","value":',
                f'{{"metric":"peak_memory","statistic":"p{q}","unit":"bytes","value":',
            ),
            "",
        )
        for q in ("20", "80")
    }
    stats_close = '},"primaryStatistic":"median"}'
    memory_on = pc.and_(is_memory, has_median)
    timing_on = pc.and_(is_speed, has_median)
    return pc.binary_join_element_wise(
        cols["frag_head"].take(take),
        names,
        cols["frag_middle"].take(take),
        ts_slug,
        pa.scalar('","metrics":{'),
        pc.if_else(is_speed, '"ms_20":', '"mb_20":'), numbers("20"),
        pc.if_else(is_speed, ',"ms_50":', ',"mb_50":'), numbers("50"),
        pc.if_else(is_speed, ',"ms_80":', ',"mb_80":'), numbers("80"),
        pa.scalar('}},"measurements":['),
        opening["20"], integer["20"], when(finite["20"], "}"),
        when(pc.and_(finite["20"], finite["80"]), ","),
        opening["80"], integer["80"], when(finite["80"], "}"),
        pa.scalar('],"observedAt":"'),
        observed,
        pa.scalar('","status":"'),
        status,
        pa.scalar('"'),
        when(memory_on, ',"memory":{"peakBytes":{"median":'),
        pc.if_else(memory_on, integer["50"], ""),
        when(memory_on, stats_close),
        when(timing_on, ',"timing":{"latencyNs":{"median":'),
        pc.if_else(timing_on, integer["50"], ""),
        when(timing_on, stats_close),
        pa.scalar("}}\n"),
        "",
    )  # fmt: skip
