"""Steps that are not Liger's code: a baseline's own, and one many kernels take at one commit.

A change in the series of a provider that does not run Liger's code (torch, huggingface,
torch_compile, ...) is `environment` whatever its size: the reference code or the software
under it moved (`mark_baseline_steps`).

Upstream pins neither torch nor triton: a new version, a driver or another host under the
benchmark job moves kernels that no commit touched. Per kind of machine (GPU, software class,
origin), the changes that start at the same point (the same commit, or release where no commit
is known) are counted by kernel; at `kernels` or more, each open change there becomes
`environment`. Every change row gets the count (`kernels_at_step`).

What is counted (`across`): by default every kernel that moved at the step, whatever the metric
and direction. A new compiler, library or host does not move every kernel the same way: on
upstream's history the steps between runs that no code explains move some kernels faster and
others slower, and time with memory (across the Aug-Oct 2025 outage 12 kernels moved at one
step: 8 faster, 8 slower, 3 larger and 2 smaller in memory, no one piece reaching 5).
Counted per metric and direction (`across=False`), each of those pieces stays under the
threshold. A kernel is counted once whatever it moved, so one commit changing one kernel's
time and memory (upstream's #815, #945) still counts one.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from .detect import OPEN_STATES

_MACHINE = ("origin", "gpu_product", "gpu_form_factor", "software_class")
_SIGN = ("metric", "direction")


def step_of(row: dict[str, Any], across: bool = True) -> tuple[Any, ...]:
    fields = _MACHINE if across else _MACHINE + _SIGN
    # Per calibration class as well (a re-run's device time: series_class `device_time/<pass>`
    # where upstream's timer has `<metric>/<pass>`): one kernel measured by two timers is two
    # kernels' worth of evidence for neither.
    kind = str(row.get("series_class") or "").split("/")[0]
    own_class = None if kind == row.get("metric") else kind
    return (
        *(row.get(f) for f in fields),
        own_class,
        row.get("after_commit") or row["after_release"],
    )


def mark_shared_steps(
    rows: Sequence[dict[str, Any]],
    kernels: int,
    across: bool = True,
    context: Iterable[dict[str, Any]] = (),
) -> None:
    """Set `kernels_at_step` on every row; open changes at a shared step become `environment`.
    `across`: count a step's kernels over both metrics and directions (else per metric and
    direction). `context`: changes of series not analysed now (an hourly analysis's untouched
    series, as the table holds them): counted, never changed."""
    counted = _kernels_at_steps(itertools.chain(rows, context), across)
    for r in rows:
        n = len(counted.get(step_of(r, across), ()))
        r["kernels_at_step"] = n
        if r["state"] in OPEN_STATES and n >= kernels:
            r["state"] = "environment"


def unsettled(
    rows: Sequence[dict[str, Any]],
    context: Sequence[dict[str, Any]],
    previous: Sequence[dict[str, Any]],
    kernels: int,
    across: bool = True,
) -> list[dict[str, Any]]:
    """The `context` rows whose state the counts with `rows` could change through
    `mark_shared_steps`, where `previous` are the table's rows of the series `rows` come
    from (an hourly analysis: `context` its untouched series' changes, `rows` what it found):
    an open change at a step of `kernels` kernels or more, and a change of Liger's code that
    is `environment` at a step that had that many before and has fewer now. Their series must
    be analysed again: whether such a change would be open without the shared step is not
    stored. A step that stays on one side of the threshold changes no state."""
    before = _kernels_at_steps(itertools.chain(previous, context), across)
    after = _kernels_at_steps(itertools.chain(rows, context), across)
    out = []
    for r in context:
        step = step_of(r, across)
        now = len(after.get(step, ()))
        if r["state"] in OPEN_STATES:
            if now >= kernels:
                out.append(r)
        elif (
            r["state"] == "environment"
            and now < kernels <= len(before.get(step, ()))
            and is_liger(r["kernel"], r.get("provider"))
        ):
            out.append(r)
    return out


def _kernels_at_steps(
    rows: Iterable[dict[str, Any]], across: bool
) -> dict[tuple[Any, ...], set[str]]:
    counted: dict[tuple[Any, ...], set[str]] = {}
    for r in rows:
        if r["state"] != "harness":
            counted.setdefault(step_of(r, across), set()).add(r["kernel"])
    return counted


@functools.cache
def is_liger(kernel: str | None, provider: str | None) -> bool:
    """Whether `provider` runs Liger's code for `kernel`: the catalog's `liger_provider`, or any
    provider named `liger...` (variants such as `liger-fp32-accum`)."""
    from ..catalog import default_catalog

    if provider is None:
        return False
    info = default_catalog().kernel(kernel) if kernel else None
    own = info.liger_provider if info is not None else "liger"
    return provider == own or provider.startswith("liger")


def mark_baseline_steps(rows: Sequence[dict[str, Any]]) -> None:
    """Open changes of providers that do not run Liger's code become `environment`."""
    for r in rows:
        if r["state"] in OPEN_STATES and not is_liger(r["kernel"], r["provider"]):
            r["state"] = "environment"
