"""A kernel page's parts on small inputs: the speed-up charts' grouping and order, and the
fields each release point is given (both built from plain lists, no pandas per group)."""

from __future__ import annotations

import json
import re
from typing import Any

import pandas as pd

from kindex_etl.report.charts import _Charts, _records, _speedup_section, _texts


def _speedup(gpu: str, software: Any, metric: str, mode: Any, base: str, release: str,
             speedup: float) -> dict[str, Any]:  # fmt: skip
    return {
        "gpu_product": gpu, "gpu_form_factor": None, "gpu_name": gpu, "software_class": software,
        "metric": metric, "operation_mode": mode, "baseline": base, "liger_version": release,
        "speedup": speedup, "ratio": 1 / speedup, "ratio_low": 0.9 / speedup,
        "ratio_high": 1.1 / speedup, "pairs": 3,
    }  # fmt: skip


def _boxes(html: str) -> list[tuple[str, dict[str, Any]]]:
    heads = re.findall(r'<div class="chartbox"><h3>(.*?)</h3>', html)
    specs = re.findall(r'<script type="application/json" id="c\d+-data">(.*?)</script>', html)
    return list(zip(heads, [json.loads(s) for s in specs], strict=True))


def test_speedup_charts_group_by_machine_and_pass_in_their_order() -> None:
    rows = [
        # Given newest first and PEP 440 apart from string order (0.10.0 after 0.9.0).
        _speedup("H100", "upstream", "memory", "full", "torch", "0.10.0", 1.5),
        _speedup("H100", "upstream", "speed", "backward", "torch", "0.10.0", 2.0),
        _speedup("H100", "upstream", "speed", "backward", "torch", "0.9.0", 1.8),
        _speedup("H100", "upstream", "speed", "full", "torch", "0.10.0", 2.2),
        _speedup("H100", "upstream", "speed", "full", "huggingface", "0.9.0", 1.1),
        _speedup("H100", "upstream", "speed", "full", "torch", "0.9.0", 2.1),
        _speedup("H100", "upstream", "speed", "full", "huggingface", "0.10.0", 1.2),
        _speedup("H100", "upstream", "memory", "full", "torch", "0.9.0", 1.4),
        _speedup("A100", "torch-2.5", "speed", "full", "torch", "0.9.0", 3.0),
        _speedup("A100", "torch-2.5", "speed", "full", "torch", "0.10.0", 3.1),
        # One release only: a table, sorted as pandas sorted it: an empty pass is a value (it
        # sorts first), a missing one sorts last.
        _speedup("B200", "upstream", "speed", None, "torch", "0.10.0", 4.0),
        _speedup("B200", "upstream", "speed", "backward", "torch", "0.10.0", 5.0),
        _speedup("B200", "upstream", "speed", "", "torch", "0.10.0", 6.0),
    ]
    html = _speedup_section(rows, _Charts())
    boxes = _boxes(html)
    assert [h for h, _ in boxes] == ["A100 · torch-2.5", "H100"]
    options = boxes[1][1]["workloads"]
    # Speed before memory, then full, forward, backward.
    assert [o["title"].split(":")[0] for o in options] == [
        "speed · full", "speed · backward", "memory · full",
    ]  # fmt: skip
    full = options[0]
    assert [t["name"] for t in full["traces"]] == ["liger vs huggingface", "liger vs torch"]
    assert [t["x"] for t in full["traces"]] == [["0.9.0", "0.10.0"], ["0.9.0", "0.10.0"]]
    assert full["traces"][1]["y"] == [2.1, 2.2]
    assert full["layout"]["xaxis"]["categoryarray"] == ["0.9.0", "0.10.0"]
    table = html.split("Measured at one release only", 1)[1]
    assert table.index("6×") < table.index("5×") < table.index("4×")


def test_release_points_carry_commit_label_origin_minute_and_gpu() -> None:
    frame = pd.DataFrame(
        {
            "series_key": ["s", "s", "s"],
            "liger_version": ["0.5.0", "0.5.0", "0.6.0"],
            "release_rank": [1, 0, 2],
            "commit_sha": ["abcdef1234567", None, ""],
            "origin": ["ci", None, "contributed"],
            "operation_mode": ["full", None, "full"],
            "software_class": ["upstream", "upstream", None],
            "gpu_product": ["H100", None, "H100"],
            "gpu_form_factor": ["SXM", None, "SXM"],
            "gpu_name": ["NVIDIA H100", "NVIDIA A10G", "NVIDIA H100"],
            "metric": ["speed"] * 3,
            "value": [1.0, 2.0, 3.0],
            "observed_at": pd.to_datetime(
                ["2024-01-01T22:38:59Z", "2023-12-31T23:59:00Z", None], utc=True
            ),
        }
    )
    first, second, third = _records(frame)  # sorted by series, rank, date
    assert (first["x_label"], first["commit"], first["origin"]) == ("0.5.0", "", "")
    assert (first["date"], first["gpu"], first["mode"]) == ("2023-12-31 23:59", "NVIDIA A10G", "")
    assert (second["x_label"], second["commit"]) == ("0.5.0 · abcdef1", "abcdef1234567")
    assert (second["date"], second["gpu"], second["origin"]) == (
        "2024-01-01 22:38",
        "H100 SXM",
        "ci",
    )
    assert (third["x_label"], third["date"], third["software"]) == ("0.6.0", "", "")
    assert third["origin"] == "contributed"


def test_point_texts_are_made_once_per_value_and_type() -> None:
    # 1, 1.0 and True are one dict key: each keeps its own text.
    assert _texts([True, 1, 1.0, None, float("nan"), "", "a", "a"]) == [
        "True", "1", "1.0", "", "", "", "a", "a",
    ]  # fmt: skip
