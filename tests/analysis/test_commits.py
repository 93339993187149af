"""Series of upstream commits in history order: origins apart, controls, harness revisions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.analysis.alerts import event
from kindex_etl.analysis.run import detect_changes
from kindex_etl.api import IngestOptions, ingest
from kindex_etl.extract.history import History
from kindex_etl.storage import open_store
from tests.helpers import row, write_csv

# Eight commits on main: `a000000` oldest. Between tags upstream's label is the previous
# release's number: the four commits after v0.6.4 all say "0.6.4" and shipped in 0.6.5.
SHAS = [f"a{i:06x}" for i in range(8)]
LABELS = ["0.6.3", "0.6.4", "0.6.4", "0.6.4", "0.6.4", "0.6.5", "0.6.5", "0.6.5"]
FIRST = ["v0.6.3", "v0.6.4", "v0.6.5", "v0.6.5", "v0.6.5", "v0.6.5", None, None]
KERNEL = "megatron_rms_norm"


def history(harness: dict[str, list[str]] | None = None) -> History:
    return History.of(
        {s: {"position": 100 + 3 * i, "release": FIRST[i]} for i, s in enumerate(SHAS)},
        harness,
    )


def measured(value_ms: float, *, commit: int, provider: str = "liger", kernel: str = KERNEL,
             metric: str = "speed", hour: int = 10) -> dict[str, str]:  # fmt: skip
    # Commit 2 was benchmarked last (upstream re-ran it weeks later): time order is not
    # history order.
    day = 28 if commit == 2 else 1 + commit
    return row(
        kernel_name=kernel,
        kernel_provider=provider,
        metric_name=metric,
        metric_unit="ms" if metric == "speed" else "MB",
        y_value_50=repr(value_ms),
        y_value_20=repr(value_ms * 0.99),
        y_value_80=repr(value_ms * 1.01),
        timestamp=f"2026-03-{day:02d} {hour:02d}:00:00",
        liger_version=LABELS[commit],
    )


def ci_warehouse(
    tmp: Path,
    series: dict[tuple[str, str], Sequence[float]],
    contributed: Sequence[dict[str, str]] = (),
) -> str:
    """One per-commit file per commit holding every (kernel, provider) series' value there."""
    up = tmp / "up"
    for i, sha in enumerate(SHAS):
        rows = [
            measured(values[i], commit=i, provider=provider, kernel=kernel)
            for (kernel, provider), values in series.items()
        ]
        write_csv(up / f"benchmarks/{sha}/benchmark.csv", rows)
    if contributed:
        write_csv(up / "benchmark/data/all_benchmark_data.csv", contributed)
    ingest(str(up), str(tmp / "wh"), IngestOptions(trigger=False))
    return str(tmp / "wh")


FLAT = [0.2] * 8
STEP = [0.2] * 5 + [0.26] * 3  # +30 % from commit 5 on


def test_a_commit_ordered_series_puts_the_step_in_its_commit_range(tmp_path: Path) -> None:
    # The step is between commits 3 and 4, both labelled 0.6.4: pooled by release it would
    # vanish inside one point. Commit 2 was measured last in time, still placed by history.
    values = [0.2] * 4 + [0.26] * 4
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): values})
    (c,) = detect_changes(open_store(wh), history=history()).changes
    assert c["state"] == "alert" and c["origin"] == "ci"
    assert (c["before_commit"], c["after_commit"]) == (SHAS[3], SHAS[4])
    assert (c["before_position"], c["after_position"]) == (109, 112)
    assert (c["before_release"], c["after_release"]) == ("0.6.4", "0.6.4")  # labels as written
    assert c["first_release"] == "0.6.5"
    assert (c["before_releases"], c["after_releases"]) == (4, 4)  # points are commits
    assert c["ratio"] == pytest.approx(1.3, rel=1e-3)
    payload = event(c, wh)["payload"]
    for key in ("before_commit", "after_commit", "first_release", "origin", "baseline_ratio",
                "before_harness", "after_harness", "false_alarm_rate"):  # fmt: skip
        assert key in payload


def test_a_contributed_row_never_joins_a_ci_series(tmp_path: Path) -> None:
    # A contributor's machine under the same GPU name and label, far slower: in a CI series it
    # would be the "before" of a +50 % alert; it stays in a series of its own.
    contributed = [measured(0.3, commit=c, hour=5) for c in (6, 7)]
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): FLAT}, contributed)
    result = detect_changes(open_store(wh), history=history())
    assert result.changes == []
    assert result.series == 2
    assert result.runs == 8 + 2


def test_a_shift_the_baselines_share_is_an_environment_change(tmp_path: Path) -> None:
    wh = ci_warehouse(
        tmp_path,
        {(KERNEL, "liger"): STEP, (KERNEL, "torch"): [v * 2 for v in STEP]},
    )
    changes = detect_changes(open_store(wh), history=history()).changes
    assert {c["provider"] for c in changes} == {"liger", "torch"}
    for c in changes:
        assert c["state"] == "environment", c["provider"]
        assert c["baseline_ratio"] == pytest.approx(1.3, rel=1e-3)
        assert c["relative_ratio"] == pytest.approx(1.0, abs=1e-3)
        assert (c["before_commit"], c["after_commit"]) == (SHAS[4], SHAS[5])
    liger = next(c for c in changes if c["provider"] == "liger")
    assert liger["baseline_providers"] == ["torch"]


def test_a_step_liger_takes_alone_stays_an_alert_with_its_evidence(tmp_path: Path) -> None:
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): STEP, (KERNEL, "torch"): [0.4] * 8})
    (c,) = detect_changes(open_store(wh), history=history()).changes
    assert c["provider"] == "liger" and c["state"] == "alert"
    assert c["baseline_ratio"] == pytest.approx(1.0)
    assert c["relative_ratio"] == pytest.approx(1.3, rel=1e-3)


def test_many_kernels_stepping_at_one_commit_are_an_environment_change(tmp_path: Path) -> None:
    kernels = ["megatron_rms_norm", "rms_norm", "embedding", "kto_loss", "swiglu"]
    wh = ci_warehouse(tmp_path, {(k, "liger"): STEP for k in kernels})
    changes = detect_changes(open_store(wh), history=history()).changes
    assert len(changes) == len(kernels)
    assert {c["state"] for c in changes} == {"environment"}
    assert {c["kernels_at_step"] for c in changes} == {len(kernels)}
    # Four are not many: each stays an alert.
    wh4 = ci_warehouse(tmp_path / "four", {(k, "liger"): STEP for k in kernels[:4]})
    assert {c["state"] for c in detect_changes(open_store(wh4), history=history()).changes} == {
        "alert"
    }


def test_kernels_moving_either_way_at_one_commit_are_counted_together(tmp_path: Path) -> None:
    # Five kernels move at commit 5: three slower, one faster, one in memory. No metric and
    # direction holds five, as across upstream's Aug-Oct 2025 outage; together they do.
    from dataclasses import replace

    from kindex_etl.analysis.calibration import default_calibration

    faster = [0.2] * 5 + [0.15] * 3
    series: dict[tuple[str, str], Sequence[float]] = {
        ("megatron_rms_norm", "liger"): STEP,
        ("rms_norm", "liger"): STEP,
        ("embedding", "liger"): STEP,
        ("kto_loss", "liger"): faster,
    }
    up = tmp_path / "up"
    for i, sha in enumerate(SHAS):
        rows = [measured(v[i], commit=i, kernel=k, provider=p) for (k, p), v in series.items()]
        rows.append(measured(STEP[i], commit=i, kernel="swiglu", metric="memory"))
        write_csv(up / f"benchmarks/{sha}/benchmark.csv", rows)
    ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    store = open_store(str(tmp_path / "wh"))
    changes = detect_changes(store, history=history()).changes
    assert sorted((c["kernel"], c["metric"], c["direction"]) for c in changes) == [
        ("embedding", "speed", "slower"),
        ("kto_loss", "speed", "faster"),
        ("megatron_rms_norm", "speed", "slower"),
        ("rms_norm", "speed", "slower"),
        ("swiglu", "memory", "larger"),
    ]
    assert {c["kernels_at_step"] for c in changes} == {5}
    # Counted together, each is then judged against its class there: the three that moved
    # alike are the environment; kto_loss, faster where its class got slower, and swiglu, the
    # one memory step, stay open with the environment suspected.
    states = {c["kernel"]: (c["state"], c["suspected"]) for c in changes}
    assert states == {
        "embedding": ("environment", None),
        "megatron_rms_norm": ("environment", None),
        "rms_norm": ("environment", None),
        "kto_loss": ("improvement", "environment"),
        "swiglu": ("alert", "environment"),
    }
    # Counted per metric and direction (the rule before), each piece is under five.
    cal = default_calibration()
    apart = replace(cal, settings=replace(cal.settings, environment_across=False))
    changes = detect_changes(store, history=history(), calibration=apart).changes
    assert {c["kernel"]: c["state"] for c in changes} == {
        "embedding": "alert",
        "kto_loss": "improvement",
        "megatron_rms_norm": "alert",
        "rms_norm": "alert",
        "swiglu": "alert",
    }
    assert {c["kernel"]: c["kernels_at_step"] for c in changes} == {
        "embedding": 3, "kto_loss": 1, "megatron_rms_norm": 3, "rms_norm": 3, "swiglu": 1,
    }  # fmt: skip


def passes_warehouse(tmp: Path, passes: dict[str, Sequence[float]]) -> str:
    """One kernel's liger series, one per pass (operation mode), one file per commit."""
    up = tmp / "up"
    for i, sha in enumerate(SHAS):
        rows = [{**measured(v[i], commit=i), "kernel_operation_mode": mode}
                for mode, v in passes.items()]  # fmt: skip
        write_csv(up / f"benchmarks/{sha}/benchmark.csv", rows)
    ingest(str(up), str(tmp / "wh"), IngestOptions(trigger=False))
    return str(tmp / "wh")


def test_a_full_pass_step_its_forward_and_backward_do_not_take_is_not_the_kernel(
    tmp_path: Path,
) -> None:
    # `full` +30 % at commit 5, forward and backward flat: the kernel's code runs in those
    # passes, so what moved is outside it (upstream's kto_loss full +11 % at 33924d2).
    wh = passes_warehouse(tmp_path, {"full": STEP, "forward": FLAT, "backward": FLAT})
    (c,) = detect_changes(open_store(wh), history=history()).changes
    assert (c["operation_mode"], c["state"]) == ("full", "environment")
    assert c["after_commit"] == SHAS[5]
    # Backward takes the step too: a change in the kernel, both alerts.
    both = passes_warehouse(tmp_path / "b", {"full": STEP, "forward": FLAT, "backward": STEP})
    changes = detect_changes(open_store(both), history=history()).changes
    assert {(c["operation_mode"], c["state"]) for c in changes} == {
        ("full", "alert"),
        ("backward", "alert"),
    }
    # Backward steps the other way: not the same change.
    other = [0.2] * 5 + [0.15] * 3
    away = passes_warehouse(tmp_path / "o", {"full": STEP, "backward": other})
    states = {c["operation_mode"]: c["state"] for c in
              detect_changes(open_store(away), history=history()).changes}  # fmt: skip
    assert states == {"full": "environment", "backward": "improvement"}
    # Only `full` measured: nothing says, the alert stands.
    alone = passes_warehouse(tmp_path / "a", {"full": STEP})
    (c,) = detect_changes(open_store(alone), history=history()).changes
    assert c["state"] == "alert"


def test_the_full_pass_rule_holds_however_the_runs_are_bucketed(tmp_path: Path) -> None:
    # A warehouse of more than one bucket's runs is analysed bucket by bucket, each a hash of
    # its runs' bucket fields. With the pass among them, `full` and its forward and backward
    # fell in different buckets, and `full`'s step was judged without them: over the 4.4M
    # realistic runs, 4 of 16,889 changes had another state than in one bucket.
    from kindex_etl.analysis.series import RunSource

    wh = passes_warehouse(tmp_path, {"full": STEP, "forward": FLAT, "backward": FLAT})
    store = open_store(wh)
    split = RunSource.open(store, bucket_rows=1, history=history())
    assert split.bucket_digits(split.file_rows(split.run_files)) > 0  # spilled, hashed
    for bucket_rows in (1, 10**9):
        (c,) = detect_changes(store, history=history(), bucket_rows=bucket_rows).changes
        assert (c["operation_mode"], c["state"]) == ("full", "environment")


def test_the_full_pass_rule_is_a_setting(tmp_path: Path) -> None:
    from dataclasses import replace

    from kindex_etl.analysis.calibration import default_calibration

    wh = passes_warehouse(tmp_path, {"full": STEP, "forward": FLAT, "backward": FLAT})
    cal = default_calibration()
    off = replace(cal, settings=replace(cal.settings, full_needs_pass=False))
    (c,) = detect_changes(open_store(wh), history=history(), calibration=off).changes
    assert c["state"] == "alert"


def test_a_harness_revision_splits_a_series(tmp_path: Path) -> None:
    # The benchmark script changed at commit 5: the +30 % there is the harness, not liger.
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): STEP})
    split = history({KERNEL: [SHAS[0], SHAS[5]]})
    (c,) = detect_changes(open_store(wh), history=split).changes
    assert c["state"] == "harness"
    assert (c["before_commit"], c["after_commit"]) == (SHAS[4], SHAS[5])
    assert (c["before_harness"], c["after_harness"]) == (SHAS[0], SHAS[5])
    # Without the revision the same data is an alert.
    (a,) = detect_changes(open_store(wh), history=history()).changes
    assert a["state"] == "alert" and a["before_harness"] is None


def test_a_step_within_one_harness_revision_is_still_an_alert(tmp_path: Path) -> None:
    values = [0.2] * 2 + [0.26] * 6  # step at commit 2, harness revision at commit 5
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): values})
    split = history({KERNEL: [SHAS[0], SHAS[5]]})
    (c,) = detect_changes(open_store(wh), history=split).changes
    assert c["state"] == "alert"
    assert (c["before_commit"], c["after_commit"]) == (SHAS[1], SHAS[2])
    assert c["before_harness"] == c["after_harness"] == SHAS[0]


def test_host_variance_from_a_commit_rerun_days_later(tmp_path: Path) -> None:
    from kindex_etl.analysis.calibration import host_variance, warehouse_pairs

    up = tmp_path / "up"
    # Each commit measured twice a minute apart (one sitting), and commit 3 again a week
    # later on another host, 20 % slower.
    for i, sha in enumerate(SHAS):
        rows = [measured(0.2, commit=i), {**measured(0.2 * 1.01, commit=i), "timestamp":
                f"2026-03-{1 + i:02d} 10:01:00" if i != 2 else "2026-03-28 10:01:00"}]  # fmt: skip
        if i == 3:
            rows.append({**measured(0.24, commit=i), "timestamp": "2026-03-11 10:00:00"})
        write_csv(up / f"benchmarks/{sha}/benchmark.csv", rows)
    ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    pairs = warehouse_pairs(open_store(str(tmp_path / "wh")))
    got = host_variance(pairs)["speed/full"]
    assert (got["near_pairs"], got["far_pairs"]) == (8, 1)
    assert got["near_sigma"] == pytest.approx(0.00704, abs=1e-4)  # ln(1.01) / sqrt 2
    assert got["far_sigma"] == pytest.approx(abs(math.log(0.24 / 0.202)) / math.sqrt(2), abs=1e-4)
    assert got["host_sigma"] > 0.1 and got["far_moved_over_10pct"] == 1.0


def _six_commits_of_two_kernels(up: Path) -> None:
    """Per-commit files of six commits: rms_norm stepping (STEP), embedding flat."""
    for i, sha in enumerate(SHAS[:6]):
        rows = [measured(v, commit=i, kernel=k) for k, v in (("rms_norm", STEP[i]),
                                                             ("embedding", 0.2))]  # fmt: skip
        write_csv(up / f"benchmarks/{sha}/benchmark.csv", rows)


def test_an_hourly_ingest_analyses_only_the_series_it_touched(tmp_path: Path) -> None:
    from kindex_etl.analysis.run import run_regressions

    up, wh = tmp_path / "up", str(tmp_path / "wh")
    _six_commits_of_two_kernels(up)
    first = ingest(str(up), wh, IngestOptions(trigger=False))
    full = run_regressions(wh, history=history())
    assert not full.incremental and full.series == 2 and full.runs == 12
    (alert,) = full.changes
    assert alert["kernel"] == "rms_norm" and alert["state"] == "pending"  # one point after
    # The next hour's commit measured rms_norm only (and its torch baseline, a new series).
    rows = [measured(STEP[6], commit=6, kernel="rms_norm"),
            measured(0.4, commit=6, kernel="rms_norm", provider="torch")]  # fmt: skip
    write_csv(up / f"benchmarks/{SHAS[6]}/benchmark.csv", rows)
    second = ingest(str(up), wh, IngestOptions(trigger=False))
    seq = min(second.commits) - 1  # what the ingest flow passes on
    assert seq > max(first.commits)  # the full analysis' own commit came between
    hourly = run_regressions(wh, history=history(), after_seq=seq)
    assert hourly.incremental
    assert hourly.series == 2 and hourly.runs == 7 + 1  # rms_norm's liger and torch; no embedding
    (now,) = hourly.new
    assert now["change_id"] == alert["change_id"] and now["state"] == "alert"
    # A full analysis agrees on the change.
    assert [c["state"] for c in run_regressions(wh, history=history()).changes] == ["alert"]


def test_an_hourly_analysis_reads_the_log_back_past_the_daily_checkpoint(tmp_path: Path) -> None:
    # The daily compaction checkpoints; the log records before it stay, so the next hour's
    # analysis still knows what its ingest touched and reads only that (it was a full one).
    from kindex_etl.analysis.run import run_regressions
    from kindex_etl.load.warehouse import open_warehouse
    from kindex_etl.maintenance.compaction import compact

    up, wh = tmp_path / "up", str(tmp_path / "wh")
    _six_commits_of_two_kernels(up)
    ingest(str(up), wh, IngestOptions(trigger=False))
    full = run_regressions(wh, history=history())
    compact(wh)
    checkpointed = open_warehouse(wh)
    checkpointed.refresh()
    assert checkpointed.records == [] and checkpointed.head > full.seq
    rows = [measured(STEP[6], commit=6, kernel="rms_norm")]
    write_csv(up / f"benchmarks/{SHAS[6]}/benchmark.csv", rows)
    ingest(str(up), wh, IngestOptions(trigger=False))
    hourly = run_regressions(wh, history=history(), after_seq=full.seq)
    assert hourly.incremental
    assert hourly.series == 1 and hourly.runs == 7  # rms_norm alone; no embedding
    assert [c["state"] for c in hourly.new] == ["alert"]


def test_release_comparisons_take_each_release_at_its_tagged_commit_and_one_origin(
    tmp_path: Path,
) -> None:
    from kindex_etl.analysis.compare import compare_releases
    from kindex_etl.analysis.run import points_frame

    # 0.6.4 is commits 1-4: 0.2 at its tag (commit 1), then 0.26 on main after it. A
    # contributor's 0.6.4 row at 0.1 would make any comparison with it "lower".
    values = [0.2, 0.2, 0.26, 0.26, 0.26, 0.2, 0.2, 0.2]
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): values}, [measured(0.1, commit=3, hour=5)])
    points: list = []
    detect_changes(open_store(wh), history=history(), points=points)
    frame = points_frame(points)
    (row,) = compare_releases(frame, "0.6.3", "0.6.4", min_effect=0.05)
    assert row["origin"] == "ci" and row["pairs"] == 1
    assert row["ratio"] == pytest.approx(1.0) and row["verdict"] == "no difference detectable"


def test_a_step_only_a_baseline_takes_is_not_an_alert(tmp_path: Path) -> None:
    # torch's own series steps (its reference code or its software moved); liger held still.
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): FLAT, (KERNEL, "torch"): STEP})
    (c,) = detect_changes(open_store(wh), history=history()).changes
    assert c["provider"] == "torch" and c["state"] == "environment"
    assert c["baseline_providers"] == ["liger"] and c["baseline_ratio"] == pytest.approx(1.0)


def test_the_many_kernels_rule_counts_each_timer_apart() -> None:
    """Issue 34's device-time series are a class of their own: upstream-timer changes on two
    kernels and device-time changes on three at one re-run commit are five kernels for
    neither timer."""
    from kindex_etl.analysis.controls import mark_shared_steps

    def change(kernel: str, series_class: str) -> dict[str, object]:
        return {"kernel": kernel, "state": "alert", "series_class": series_class,
                "origin": "rerun", "gpu_product": "NVIDIA H200", "gpu_form_factor": None,
                "software_class": "torch=2.11", "after_commit": "abc1234",
                "after_release": "0.8.5", "metric": "speed", "direction": "slower",
                # Every kernel moved alike: at five, each is like its class.
                "provider": "liger", "operation_mode": "full", "ratio": 1.3,
                "before_value": 1e6}  # fmt: skip

    rows = [change(k, "speed/full") for k in ("a", "b")]
    rows += [change(k, "device_time/full") for k in ("c", "d", "e")]
    mark_shared_steps(rows, kernels=5)
    assert [(r["state"], r["kernels_at_step"]) for r in rows] == [("alert", 2)] * 2 + [
        ("alert", 3)
    ] * 3
    more = [change(k, "device_time/forward") for k in ("f", "g")]
    mark_shared_steps(rows + more, kernels=5)
    assert {r["state"] for r in rows[2:] + more} == {"environment"}
    assert {r["state"] for r in rows[:2]} == {"alert"}


def test_an_hourly_analysis_judges_again_only_the_untouched_changes_a_moved_count_can_change() -> (
    None
):
    """`controls.unsettled`: which changes of the series an hourly analysis did not read can
    take another state from the counts its own changes moved (five kernels: environment)."""
    from kindex_etl.analysis.controls import unsettled
    from kindex_etl.analysis.series import Touched, touched_by

    def change(kernel: str, state: str, step: str, provider: str = "liger") -> dict[str, Any]:
        return {"kernel": kernel, "state": state, "provider": provider, "series_key": kernel,
                "series_class": "speed/full", "origin": "ci", "gpu_product": "NVIDIA H100",
                "gpu_form_factor": None, "software_class": "upstream", "after_commit": step,
                "after_release": "0.8.5", "metric": "speed", "direction": "slower",
                "workload_digest": f"w-{kernel}", "kernels_at_step": None,
                # All moved alike: at five kernels, each is like its class.
                "operation_mode": "full", "ratio": 1.3, "before_value": 1e6}  # fmt: skip

    # Step S had five kernels; the hour no longer finds b's change there: four remain. Liger's
    # `environment` changes there may be open without the shared step (a null stored count
    # says nothing); a torch change is `environment` as a baseline, a harness one not counted.
    previous = [change("a", "environment", "S"), change("b", "environment", "S")]
    down = [change("c", "environment", "S"), change("d", "environment", "S", provider="torch"),
            change("f", "environment", "S"), change("h", "harness", "S")]  # fmt: skip
    # Step T had four kernels' alerts; the hour finds a fifth there.
    up = [change(k, "alert", "T") for k in ("p", "q", "r", "s")]
    # Step U had six and keeps five: nothing there changes.
    stay = [change(k, "environment", "U") for k in ("u", "v", "w", "x", "y")]
    found = [change("a", "environment", "S"), change("t", "alert", "T")]
    context = down + up + stay
    flagged = unsettled(found, context, [*previous, change("z", "environment", "U")], kernels=5)
    assert sorted(r["kernel"] for r in flagged) == ["c", "f", "p", "q", "r", "s"]
    # Nothing moved: nothing to read again.
    assert unsettled(previous, context, previous, kernels=5) == []
    # A kernel that moved unlike its class stays open at five: the hour does not flag it.
    unlike = [{**r, "ratio": 3.0} if r["kernel"] == "p" else r for r in context]
    flagged = unsettled(found, unlike, [*previous, change("z", "environment", "U")], kernels=5)
    assert "p" not in {r["kernel"] for r in flagged}
    # A group the hour read already is not read again.
    read = touched_by([change("p", "alert", "T")])
    again = touched_by(flagged, besides=read)
    assert isinstance(again, Touched) and again.kernels == {"c", "f", "q", "r", "s"}
    assert len(again.groups) == 5
