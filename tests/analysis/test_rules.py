"""The detector's rules (`kindex_etl/analysis/rules.py`): each weighs evidence, none is a veto."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.analysis.calibration import RULE_SETTINGS, default_calibration
from kindex_etl.analysis.controls import mark_shared_steps
from kindex_etl.analysis.rules import RULES, SeriesEvidence, judge_series
from kindex_etl.analysis.run import detect_changes, run_regressions
from kindex_etl.extract.history import History
from kindex_etl.storage import open_store
from tests.analysis.test_commits import KERNEL, SHAS, STEP, ci_warehouse, history

FLAT = [0.4] * 8


def _with_revision(sha: str, providers: list[str] | None) -> History:
    rev: dict[str, Any] = {"sha": sha}
    if providers is not None:
        rev["providers"] = providers
    return History.of(
        {s: {"position": 100 + 3 * i} for i, s in enumerate(SHAS)},
        {"kernels": {KERNEL: {"revisions": [{"sha": SHAS[0]}, rev]}}},
    )


def test_a_script_revision_that_adds_a_provider_does_not_split_liger(tmp_path: Path) -> None:
    # Upstream's #830: the commit that made liger 2.3x slower also added `liger-fp32-accum` to
    # the script. The revision touched that provider only: liger's step stays an alert.
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): STEP, (KERNEL, "torch"): FLAT})
    added = _with_revision(SHAS[5], ["liger-fp32-accum"])
    (c,) = detect_changes(open_store(wh), history=added).changes
    assert (c["provider"], c["state"], c["suspected"]) == ("liger", "alert", None)
    assert (c["before_commit"], c["after_commit"]) == (SHAS[4], SHAS[5])
    # The same revision with no providers recorded touches every provider: liger's series
    # is split there, and liger stepping while its baseline held is still an alert, with the
    # revision named as a possible cause.
    every = _with_revision(SHAS[5], None)
    (s,) = detect_changes(open_store(wh), history=every).changes
    assert (s["state"], s["suspected"]) == ("alert", f"harness {SHAS[5]}")
    assert "baselines held" in s["evidence"]


def test_a_reference_change_splits_only_the_provider_that_times_it(tmp_path: Path) -> None:
    # Upstream's #974: the commit changed Liger's op and the test-tree reference that only
    # the torch provider times. torch's step is the harness's; liger's is an alert.
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): STEP, (KERNEL, "torch"): STEP})
    reference = _with_revision(SHAS[5], ["torch"])
    changes = {c["provider"]: c for c in detect_changes(open_store(wh), history=reference).changes}
    assert changes["torch"]["state"] == "harness"
    assert changes["liger"]["state"] == "alert"
    # Its baseline is split at the revision: not measured on both sides, so it says nothing.
    assert changes["liger"]["baseline_ratio"] is None
    assert "no baseline measured on both sides" in changes["liger"]["evidence"]


def test_a_liger_step_unlike_its_class_at_a_many_kernels_commit_stays_an_alert(
    tmp_path: Path,
) -> None:
    # Five kernels step x1.3 at commit 5 (an environment change); a sixth steps x2 while its
    # baseline holds. The five are environment; the sixth is an alert, the environment
    # suspected, and its evidence says how far it lies from its class.
    alike = ["rms_norm", "embedding", "kto_loss", "swiglu", "geglu"]
    series = {(k, "liger"): STEP for k in alike}
    series[(KERNEL, "liger")] = [0.2] * 5 + [0.4] * 3
    series[(KERNEL, "torch")] = FLAT
    wh = ci_warehouse(tmp_path, series)
    changes = {c["kernel"]: c for c in detect_changes(open_store(wh), history=history()).changes
               if c["provider"] == "liger"}  # fmt: skip
    assert {k: changes[k]["state"] for k in alike} == dict.fromkeys(alike, "environment")
    odd = changes[KERNEL]
    assert (odd["state"], odd["suspected"], odd["kernels_at_step"]) == ("alert", "environment", 6)
    assert "class speed/full" in odd["evidence"] and "spreads" in odd["evidence"]


def _row(kernel: str, ratio: float, **more: Any) -> dict[str, Any]:
    return {"kernel": kernel, "provider": "liger", "state": "alert", "metric": "speed",
            "operation_mode": "full", "ratio": ratio, "before_value": 1e6, "direction": "slower",
            "series_class": "speed/full", "origin": "ci", "gpu_product": "H100",
            "gpu_form_factor": "SXM", "software_class": "upstream", "after_commit": "c",
            "after_release": "0.6.4", "before_position": 10, "after_position": 12,
            **more}  # fmt: skip


def test_the_diff_weighs_at_a_shared_step() -> None:
    # At a step six kernels share, the catalog's diff decides where it can: a kernel whose
    # source a commit of the range changed is a code suspect even if it moved as its class
    # did; one whose source no commit changed moved with the environment even if it did not.
    def code(kernel: str, before: int | None, after: int | None) -> list[int] | None:
        return {"touched": [11], "untouched": []}.get(kernel)

    rows = [_row(k, 1.3) for k in ("a", "b", "c", "d")]
    rows += [_row("touched", 1.3), _row("untouched", 2.5), _row("unknown", 2.5)]
    mark_shared_steps(rows, kernels=5, code=code)
    states = {r["kernel"]: (r["state"], r.get("suspected")) for r in rows}
    assert states["touched"] == ("alert", "environment")
    assert "a code suspect" in rows[4]["evidence"]
    assert states["untouched"] == ("environment", None)
    assert "no commit of the range changed its source" in rows[5]["evidence"]
    # Where the catalog cannot say, the class decides: 2.5 is unlike 1.3.
    assert states["unknown"] == ("alert", "environment")
    assert {states[k] for k in "abcd"} == {("environment", None)}


def test_memory_is_compared_with_memory_and_needs_peers() -> None:
    # A memory step at a step where five kernels moved in time has no class to be like:
    # memory is not moved by a toolchain shift the way launch overhead is.
    rows = [_row(k, 1.3) for k in "abcde"]
    rows.append(_row("m", 1.2, metric="memory", series_class="memory/full", direction="larger"))
    mark_shared_steps(rows, kernels=5)
    assert rows[-1]["state"] == "alert" and "too few to explain it" in rows[-1]["evidence"]


def test_launch_bound_and_device_bound_steps_are_classes_apart() -> None:
    # Launch-bound kernels (under 100 us) moved x2 with a host change; device-bound ones held.
    # A device-bound kernel that moved x2 is unlike its class (the device-bound ones).
    fast = [_row(k, 2.0, before_value=20_000.0) for k in "abc"]
    slow = [_row(k, 1.02, before_value=5e6) for k in "def"]
    odd = _row("g", 2.0, before_value=5e6)
    rows = [*fast, *slow, odd]
    mark_shared_steps(rows, kernels=5)
    assert {r["state"] for r in fast} == {"environment"}
    assert odd["state"] == "alert" and "speed/full/device" in odd["evidence"]


def test_a_step_moving_with_its_baselines_is_environment_and_says_so() -> None:
    state, suspected, said = judge_series(
        SeriesEvidence("alert", True, 0.262, 0.0488, 1.3, ["torch"], None, None)
    )
    assert (state, suspected) == ("environment", None)
    assert any("moved with its baselines" in s for s in said)
    # Half the move on the baseline's side is not the same move.
    state, _, _ = judge_series(
        SeriesEvidence("alert", True, 0.262, 0.0488, 1.13, ["torch"], None, None)
    )
    assert state == "alert"


def test_a_change_is_announced_only_once_enough_points_confirm_it(tmp_path: Path) -> None:
    values = [0.2] * 6 + [0.26] * 2  # two points after the step
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): values, (KERNEL, "torch"): FLAT})
    cal = default_calibration()
    (two,) = detect_changes(open_store(wh), history=history(), calibration=cal).changes
    assert two["state"] == "alert"
    wait = replace(cal, settings=replace(cal.settings, confirm_points=3))
    (held,) = detect_changes(open_store(wh), history=history(), calibration=wait).changes
    assert held["state"] == "pending"


def test_the_rules_are_listed_in_order_and_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "regressions.md").read_text()
    assert RULES[0] == "baseline_provider" and RULES[-1] == "confirmation"
    for name in RULES:
        assert f"`{name}`" in doc, name


def test_an_announced_alert_stays_one_while_it_is_found(tmp_path: Path) -> None:
    # Rule 6 announces at `announce_z`; once announced, a lower margin (the series' noise
    # estimate grew) is no evidence against the step: the alert holds, and says why. A change
    # never announced waits as before, and the hourly and the full analysis agree.
    values = [0.2] * 6 + [0.26] * 2
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): values, (KERNEL, "torch"): FLAT})
    cal = default_calibration()
    shy = replace(cal, settings=replace(cal.settings, announce_z=1000.0))
    (never,) = detect_changes(open_store(wh), history=history(), calibration=shy).changes
    assert never["state"] == "pending"
    (told,) = run_regressions(wh, report=False, history=history(), calibration=cal).changes
    assert told["state"] == "alert"
    for after_seq in (None, 0):
        (held,) = detect_changes(
            open_store(wh), history=history(), calibration=shy, after_seq=after_seq
        ).changes
        assert (held["change_id"], held["state"]) == (told["change_id"], "alert")
        assert "announced before and still found" in held["evidence"]


@pytest.mark.parametrize("name", RULE_SETTINGS)
def test_every_threshold_of_the_rules_lives_in_calibration_json(name: str) -> None:
    import json
    from importlib import resources

    text = resources.files("kindex_etl.analysis").joinpath("calibration.json").read_text()
    assert name in json.loads(text)["detector"]
    assert getattr(default_calibration().settings, name) == json.loads(text)["detector"][name]


def test_a_harness_suspect_waits_for_the_points_that_confirm_it(tmp_path: Path) -> None:
    # Rule 6 holds for a step across a revision of liger's path too: with one point after the
    # revision it is `pending` (the revision named), with three an alert.
    late = [0.2] * 7 + [0.26]  # the step at the newest commit only
    wh = ci_warehouse(tmp_path, {(KERNEL, "liger"): late, (KERNEL, "torch"): FLAT})
    (c,) = detect_changes(open_store(wh), history=_with_revision(SHAS[7], None)).changes
    assert (c["state"], c["suspected"]) == ("pending", f"harness {SHAS[7]}")
    assert "too few points after it yet" in c["evidence"]
    wh3 = ci_warehouse(tmp_path / "three", {(KERNEL, "liger"): STEP, (KERNEL, "torch"): FLAT})
    (a,) = detect_changes(open_store(wh3), history=_with_revision(SHAS[5], None)).changes
    assert (a["state"], a["suspected"]) == ("alert", f"harness {SHAS[5]}")
