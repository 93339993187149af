"""A step many kernels take at one commit is the environment's, not a kernel's.

Upstream pins neither torch nor triton: a new version, a driver or another host under the
benchmark job moves kernels that no commit touched. Per kind of machine (GPU, software class,
origin), metric and direction, the changes that start at the same point (the same commit, or
release where no commit is known) are counted by kernel; at `kernels` or more, each open change
there becomes `environment`. Every change row gets the count (`kernels_at_step`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .detect import OPEN_STATES

_STEP = ("origin", "gpu_product", "gpu_form_factor", "software_class", "metric", "direction")


def step_of(row: dict[str, Any]) -> tuple[Any, ...]:
    return (*(row.get(f) for f in _STEP), row.get("after_commit") or row["after_release"])


def mark_shared_steps(rows: Sequence[dict[str, Any]], kernels: int) -> None:
    """Set `kernels_at_step` on every row; open changes at a shared step become `environment`."""
    counted: dict[tuple[Any, ...], set[str]] = {}
    for r in rows:
        if r["state"] != "harness":
            counted.setdefault(step_of(r), set()).add(r["kernel"])
    for r in rows:
        n = len(counted.get(step_of(r), ()))
        r["kernels_at_step"] = n
        if r["state"] in OPEN_STATES and n >= kernels:
            r["state"] = "environment"
