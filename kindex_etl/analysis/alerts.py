"""What an analysis tells people: a markdown summary of new alerts and one event per alert."""

from __future__ import annotations

from typing import Any

from .run import Analysis

EVENT = "kindex.regression.alert"
# Told to whoever heard the alert: the analysis no longer finds that change.
RETRACTED_EVENT = "kindex.regression.retracted"


def markdown(result: Analysis) -> str:
    lines = [
        "# kindex-etl regressions",
        "",
        f"- warehouse: `{result.warehouse}` at commit {result.seq}",
        f"- {result.series} series, {result.runs} runs; {len(result.changes)} changes, "
        f"{len(result.alerts)} alerts ({len(result.new_alerts)} new)",
        f"- recorded in commit: {'none (nothing new)' if result.commit is None else result.commit}",
    ]
    if result.report:
        lines.append(f"- report: `{result.report}`")
    if result.retracted:
        lines.append(
            f"- retracted: {len(result.retracted)} change(s) this analysis no longer finds ("
            + ", ".join(
                f"{c['kernel']}/{c['operation_mode']}/{c['provider']} {c['metric']} "
                f"{commit_range(c)}, was {c.get('retracted_state') or '?'}"
                for c in result.retracted[:10]
            )
            + (", ..." if len(result.retracted) > 10 else "")
            + ")"
        )
    lines += ["", "## New alerts", ""]
    if not result.new_alerts:
        lines.append("none")
    else:
        lines += [
            "| kernel | pass | metric | provider | GPU | workload | origin | releases | commits "
            "| first release | ratio [95 %] | baselines' ratio | harness | false-alarm rate |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for c in result.new_alerts:
            lines.append(
                f"| {c['kernel']} | {c['operation_mode']} | {c['metric']} | {c['provider']} "
                f"| {c['gpu_name']} ({c['software_class']}) | {c['workload_slug']} "
                f"| {c.get('origin') or '-'} | {c['before_release']} → {c['after_release']} "
                f"| {commit_range(c)} "
                f"| {c.get('first_release') or '-'} "
                f"| {c['ratio']:.4g} [{c['ratio_low']:.4g}, {c['ratio_high']:.4g}] "
                f"| {_num(c.get('baseline_ratio'))} "
                f"| {c.get('before_harness') or '-'} → {c.get('after_harness') or '-'} "
                f"| {c['false_alarm_rate']} |"
            )
    return "\n".join(lines) + "\n"


def commit_range(c: dict[str, Any]) -> str:
    """`abc1234..def5678` (last commit before, first after), releases where no commit is
    known."""
    before = c.get("before_commit") or c["before_release"]
    after = c.get("after_commit") or c["after_release"]
    return f"{before}..{after}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def event(change: dict[str, Any], warehouse: str, *, name: str = EVENT) -> dict[str, Any]:
    """Keyword arguments for `prefect.events.emit_event` for one new alert (or, by `name`,
    another event about one change)."""
    return {
        "event": name,
        "resource": {
            "prefect.resource.id": f"kindex.series.{change['series_key']}",
            "prefect.resource.name": (
                f"{change['kernel']}/{change['operation_mode']}/{change['provider']}/"
                f"{change['metric']}/{change['gpu_name']}/{change['workload_slug']}"
            ),
        },
        "related": [
            {
                "prefect.resource.id": f"kindex.warehouse.{warehouse}",
                "prefect.resource.role": "warehouse",
            },
            {
                "prefect.resource.id": f"kindex.release.{change['after_release']}",
                "prefect.resource.role": "release",
            },
            *(
                [
                    {
                        "prefect.resource.id": f"kindex.commit.{change['after_commit']}",
                        "prefect.resource.role": "commit",
                    }
                ]
                if change.get("after_commit")
                else []
            ),
        ],
        "payload": {
            k: change[k]
            for k in (
                "change_id",
                "kernel",
                "operation_mode",
                "metric",
                "provider",
                "gpu_name",
                "software_class",
                "workload_slug",
                "before_release",
                "after_release",
                "ratio",
                "ratio_low",
                "ratio_high",
                "p_value",
                "false_alarm_rate",
                "series_class",
                "state",
                "origin",
                "before_commit",
                "after_commit",
                "before_position",
                "after_position",
                "first_release",
                "before_harness",
                "after_harness",
                "baseline_ratio",
                "baseline_providers",
                "relative_ratio",
                "kernels_at_step",
                "suspected",
                "evidence",
            )
        }
        # A retraction says what the change had been.
        | ({"retracted_state": change["retracted_state"]} if change.get("retracted_state") else {}),
    }
