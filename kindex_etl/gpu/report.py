"""What a campaign shows people: the per-script table (a Prefect artifact) and a summary."""

from __future__ import annotations

from typing import Any

from kindex_etl.gpu.runner import CampaignResult


def slot_table(result: CampaignResult) -> list[dict[str, Any]]:
    """One row per script, version and repeat, in the order they ran on each GPU."""
    rows = []
    for run in result.runs:
        for s in run.slots:
            rows.append(
                {
                    "script": s.script,
                    "version": s.version,
                    "repeat": s.repeat,
                    "gpu": s.gpu,
                    "state": s.state,
                    "rows": s.rows,
                    "seconds": s.seconds,
                    "started": s.started_at,
                    "run_id": s.run_id,
                }
            )
    rows.sort(key=lambda r: (str(r["gpu"]), r["started"] or "", r["script"]))
    for skip in result.skipped:
        rows.append({"script": skip.name, "state": "skipped", "reason": skip.reason})
    return rows


def markdown(result: CampaignResult) -> str:
    env = result.environment
    lines = [
        f"# GPU re-run campaign {result.campaign_id}: liger-kernel {result.version}"
        + (f" against {result.baseline}" if result.baseline else ""),
        "",
        f"{env.get('gpu_name')} on {result.host}, GPUs {', '.join(map(str, result.gpus))}, "
        f"shard {result.shard_index + 1} of {result.shard_count}, {result.repeats} repeat(s), "
        f"{result.rows} rows in {len(result.runs)} runs",
        "",
        "| run | version | repeat | rows | ok | uploaded to |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in result.runs:
        where = r.uploaded_to or "-"
        lines.append(f"| {r.run_id} | {r.version} | {r.repeat} | {r.rows} | {r.ok} | {where} |")
    if result.skipped:
        lines += ["", "Skipped:"] + [f"- {s.name}: {s.reason}" for s in result.skipped]
    software = env.get("software") or {}
    lines += ["", "Environment digest facts: " + ", ".join(f"{k} {v}" for k, v in software.items())]
    return "\n".join(lines) + "\n"
