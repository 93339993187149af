"""benchmarks/eval/evaluate.py's scoring: commit ranges, causes, precision and recall.

The real run (ingest of upstream's history, minutes) is documented in docs/regressions.md; here
the scorer gets a small history, harness catalog, runs and regressions rows made by hand, so
each rule can fail on its own.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.catalog.history import Harness, History

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ev() -> Any:
    spec = importlib.util.spec_from_file_location(
        "eval_evaluate", ROOT / "benchmarks/eval/evaluate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["eval_evaluate"] = module
    spec.loader.exec_module(module)
    return module


SHAS = [f"{i:x}" * 40 for i in range(10)]


def history() -> History:
    return History(
        {
            "source": {"repository": "r", "head": SHAS[-1]},
            "releases": [
                {"tag": "v0.1.0", "sha": SHAS[2], "position": 2},
                {"tag": "v0.2.0", "sha": SHAS[6], "position": 6},
            ],
            "commits": [
                {
                    "position": i,
                    "sha": s,
                    "short": s[:7],
                    "date": f"2025-01-0{i + 1}T00:00:00Z" if i < 9 else "2025-01-10T00:00:00Z",
                    "release": "v0.1.0" if i <= 2 else "v0.2.0" if i <= 6 else None,
                }
                for i, s in enumerate(SHAS)
            ],
        }
    )


def harness() -> Harness:
    return Harness(
        {
            "source": {"head": SHAS[-1]},
            "scripts": {},
            "kernels": {"rms_norm": {"scripts": ["b.py"], "revisions": [8]}},
        }
    )


def events_file(tmp_path: Path) -> Path:
    path = tmp_path / "events.json"
    path.write_text(
        json.dumps(
            {
                "events": [
                    {
                        "id": "C1",
                        "kind": "code",
                        "pr": 1,
                        "commit": SHAS[4][:7],
                        "kernels": ["rms_norm"],
                        "metric": "speed",
                        "direction": "slower",
                        "evidence": "x",
                    },
                    {
                        "id": "M1",
                        "kind": "code",
                        "pr": 2,
                        "commit": SHAS[4][:7],
                        "kernels": ["rms_norm"],
                        "metric": "memory",
                        "direction": "larger",
                        "evidence": "never measured on both sides",
                    },
                ]
            }
        )
    )
    return path


def run_id(position: int | None) -> str:
    return f"run-{position}"


def runs(ev: Any, h: History) -> Any:
    out = ev.Runs()
    for p in (3, 5, 7, 9):
        out.position[run_id(p)] = p
        out.version[run_id(p)] = "0.2.0"
    out.position["cumulative"] = None
    out.version["cumulative"] = "0.1.0"
    out.ci = {("rms_norm", "speed", "H100"): [3, 5, 7, 9], ("rms_norm", "memory", "H100"): [5]}
    return out


def row(provider: str, before: list[str], after: list[str], **extra: Any) -> dict[str, Any]:
    base = {
        "change_id": f"{provider}-{before}-{after}-{extra}",
        "kernel": "rms_norm",
        "operation_mode": "full",
        "metric": "speed",
        "provider": provider,
        "direction": "slower",
        "state": "alert",
        "gpu_name": "H100",
        "before_release": "0.1.0",
        "after_release": "0.2.0",
        "before_run_ids": before,
        "after_run_ids": after,
        "warehouse_seq": 1,
    }
    return {**base, **extra}


def test_ranges_from_runs_releases_and_commit_columns(ev: Any) -> None:
    h = history()
    r = runs(ev, h)
    pooled = row("liger", [run_id(3), run_id(5)], [run_id(7), run_id(9)])
    assert ev.ranges(pooled, r, h) == {"commit": None, "measured": (3, 9), "release": (2, 6)}
    # A cumulative-file run stands for every commit that reported its version: 0.1.0 is 2..2.
    assert ev.ranges(row("liger", ["cumulative"], [run_id(5)]), r, h)["measured"] == (2, 5)
    by_sha = row("liger", [], [], before_commit=SHAS[3][:7], after_commit=SHAS[5])
    assert ev.ranges(by_sha, r, h)["commit"] == (3, 5)
    by_position = row("liger", [], [], before_position=1, after_position=4)
    assert ev.ranges(by_position, r, h)["commit"] == (1, 4)


def test_precision_recall_and_classes(ev: Any, tmp_path: Path) -> None:
    h = history()
    r = runs(ev, h)
    events = ev.load_events(events_file(tmp_path), h)
    assert [e.position for e in events] == [4, 4]
    rows = [
        row("liger", [run_id(3)], [run_id(5)]),  # the code change, in range
        row("huggingface", [run_id(3)], [run_id(5)]),  # a baseline: not liger's code
        row("liger", [run_id(7)], [run_id(9)]),  # across harness revision 8
        row("liger", ["cumulative"], [run_id(3)]),  # a contributor's run as "before"
        row("liger", [run_id(5)], [run_id(7)]),  # nothing explains it
        row("liger", [run_id(3)], [run_id(5)], state="improvement", direction="faster"),
    ]
    report = ev.Scorer(events, h, harness()).score(rows, r)
    speed = report["variants"]["measured"]["speed"]
    assert speed["alerts"] == 5
    assert speed["classes"] == {
        "code": 1,
        "environment": 1,
        "harness": 1,
        "contributed": 1,
        "unexplained": 1,
    }
    assert speed["precision"] == 0.2
    assert (speed["observable_code_events"], speed["recalled"], speed["recall"]) == (1, 1, 1.0)
    memory = report["variants"]["measured"]["memory"]
    assert memory["unobservable"] == ["M1"] and memory["recall"] is None
    # Read as releases every row says 0.1.0 -> 0.2.0, i.e. (2, 6], which holds commit 4: the
    # release reading credits all four liger alerts to the code change.
    assert report["variants"]["release"]["speed"]["classes"] == {"code": 4, "environment": 1}
    assert "commit" not in report["variants"]  # today's table has no commit columns


def test_a_shift_on_three_kernels_at_once_is_the_environment(ev: Any, tmp_path: Path) -> None:
    h = history()
    r = runs(ev, h)
    events = ev.load_events(events_file(tmp_path), h)
    rows = [
        row("liger", [run_id(5)], [run_id(7)], kernel=k, change_id=k)
        for k in ("rope", "softmax", "layer_norm")
    ]
    report = ev.Scorer(events, h, harness()).score(rows, r)
    assert report["variants"]["measured"]["speed"]["classes"] == {"environment": 3}
    report = ev.Scorer(events, h, harness()).score(rows[:2], r)
    assert report["variants"]["measured"]["speed"]["classes"] == {"unexplained": 2}


def test_an_environment_event_explains_only_the_ranges_it_falls_in(ev: Any, tmp_path: Path) -> None:
    h = history()
    r = runs(ev, h)
    path = tmp_path / "events.json"
    shift = {
        "kind": "environment",
        "pr": 3,
        "kernels": ["rms_norm"],
        "metric": "speed",
        "direction": "slower",
        "evidence": "x",
    }
    path.write_text(
        json.dumps(
            {
                "events": [
                    {
                        **shift,
                        "id": "E1",
                        "commit": SHAS[5][:7],
                        "measured": [SHAS[3][:7], SHAS[5][:7]],
                    },
                    {
                        **shift,
                        "id": "E2",
                        "commit": SHAS[9][:7],
                        "measured": [SHAS[9][:7], SHAS[9][:7]],
                    },
                ]
            }
        )
    )
    events = ev.load_events(path, h)
    assert events[0].measured == (3, 5) and events[1].measured == (9, 9)
    rows = [
        row("liger", [run_id(3)], [run_id(5)], change_id="a"),  # the shift's own range
        row("liger", [run_id(5)], [run_id(7)], change_id="b"),  # starts where it ended
        row("liger", [run_id(7)], [run_id(9)], change_id="c"),  # ends at the re-measured commit
    ]
    report = ev.Scorer(
        events, h, Harness({"source": {"head": None}, "scripts": {}, "kernels": {}})
    ).score(rows, r)
    assert report["variants"]["measured"]["speed"]["classes"] == {
        "environment": 2,
        "unexplained": 1,
    }
