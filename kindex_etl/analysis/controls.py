"""Steps that are not Liger's code: a baseline's own, and one many kernels take at one commit.

A change in the series of a provider that does not run Liger's code (torch, huggingface,
torch_compile, ...) is `environment` whatever its size: the reference code or the software
under it moved (`mark_baseline_steps`).

Upstream pins neither torch nor triton: a new version, a driver or another host under the
benchmark job moves kernels that no commit touched. Per kind of machine (GPU, software class,
origin), the changes that start at the same point (the same commit, or release where no commit
is known) are counted by kernel; at `kernels` or more, each open change there is judged
against the other kernels of its class at that step (`rules`, rule 5). Every change row gets
the count (`kernels_at_step`).

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

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .rules import (
    ENVIRONMENT,
    OPEN_STATES,
    ClassRule,
    class_levels,
    is_liger,
    judge_shared_step,
    mark_baseline_steps,
    note,
    peers_of,
)

__all__ = ["is_liger", "mark_baseline_steps", "mark_shared_steps", "step_of", "unsettled"]

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


# Which commits of a change's range changed its kernel's source (`History.source_changes`);
# None: nothing says.
CodeChanges = Callable[[str, int | None, int | None], list[int] | None]


def source_changes(row: dict[str, Any], code: CodeChanges | None) -> list[int] | None:
    """The commits in the change's range that changed its kernel's Liger source; None where
    nothing can say (no catalog, no positions: a release-pooled point). Upstream's CI rows
    only: a re-run or a contributor's row measures a release, not a commit."""
    if code is None or row.get("origin") not in (None, "ci"):
        return None
    return code(row["kernel"], row.get("before_position"), row.get("after_position"))


def default_rule(kernels: int) -> ClassRule:
    from .detect import DetectorSettings

    return DetectorSettings(environment_kernels=kernels).class_rule


def mark_shared_steps(
    rows: Sequence[dict[str, Any]],
    kernels: int,
    across: bool = True,
    context: Iterable[dict[str, Any]] = (),
    *,
    rule: ClassRule | None = None,
    code: CodeChanges | None = None,
) -> None:
    """Set `kernels_at_step` on every row, and judge the open changes at a shared step by rule
    5 of `rules` (`shared_step`): `environment` where the change moved as its class did there
    (or where the catalog says no commit of its range changed its kernel's source), else open
    with the environment suspected. `across`: count a step's kernels over both metrics and
    directions (else per metric and direction). `context`: changes of series not analysed now
    (an hourly analysis's untouched series, as the table holds them): counted and taken as
    peers, never changed."""
    rule = rule or default_rule(kernels)
    judge = _SharedSteps(list(itertools.chain(rows, context)), across, rule, code)
    for r in rows:
        r["kernels_at_step"] = judge.count(r)
        if r["state"] not in OPEN_STATES:
            continue
        verdict = judge.verdict(r)
        if verdict is None:
            continue
        explained, said = verdict
        for clause in said:
            note(r, clause)
        if explained:
            r["state"] = ENVIRONMENT
            r["suspected"] = None
        else:
            r["suspected"] = r.get("suspected") or ENVIRONMENT


class _SharedSteps:
    """The steps' kernel counts and classes' levels over a set of changes."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        across: bool,
        rule: ClassRule,
        code: CodeChanges | None = None,
    ) -> None:
        self.across, self.rule, self.code = across, rule, code
        self.counted = _kernels_at_steps(rows, across)
        self.levels = class_levels(rows, lambda r: step_of(r, across), rule.launch_bound_ns)

    def count(self, row: dict[str, Any]) -> int:
        return len(self.counted.get(step_of(row, self.across), ()))

    def verdict(self, row: dict[str, Any]) -> tuple[bool, list[str]] | None:
        """None where the step is not shared; else (explained by the environment, clauses)."""
        n = self.count(row)
        if n < self.rule.kernels:
            return None
        counted = {**row, "kernels_at_step": n}
        cls, peers = peers_of(counted, self.levels, step_of(row, self.across), self.rule)
        explained, said = judge_shared_step(counted, cls, peers, self.rule)
        clauses = [said]
        code = source_changes(row, self.code)
        if code:
            clauses.append(
                f"its source changed in {len(code)} commit(s) of the range: a code suspect"
            )
            explained = False
        elif code is not None:
            clauses.append("no commit of the range changed its source")
            explained = True
        return explained, clauses


def unsettled(
    rows: Sequence[dict[str, Any]],
    context: Sequence[dict[str, Any]],
    previous: Sequence[dict[str, Any]],
    kernels: int,
    across: bool = True,
    *,
    rule: ClassRule | None = None,
    code: CodeChanges | None = None,
) -> list[dict[str, Any]]:
    """The `context` rows whose state the changes in `rows` could change through
    `mark_shared_steps`, where `previous` are the table's rows of the series `rows` come from
    (an hourly analysis: `context` its untouched series' changes, `rows` what it found):
    Liger's open changes that rule 5 now explains, and Liger's `environment` changes at a step
    whose verdict moved (shared before and no longer, or no longer explained). Their series
    must be analysed again: whether an `environment` change would be open without the shared
    step is not stored. Baselines' and harness changes are never judged there."""
    rule = rule or default_rule(kernels)
    before = _SharedSteps(list(itertools.chain(previous, context)), across, rule, code)
    after = _SharedSteps(list(itertools.chain(rows, context)), across, rule, code)
    out = []
    for r in context:
        if not is_liger(r["kernel"], r.get("provider")):
            continue
        now = after.verdict(r)
        if r["state"] in OPEN_STATES:
            if now is not None and now[0]:
                out.append(r)
        elif r["state"] == ENVIRONMENT:
            then = before.verdict(r)
            was = then is not None and then[0]
            still = now is not None and now[0]
            if was and not still:
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
