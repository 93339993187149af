"""The detector's rules, in the order they are applied: what each weighs, and what it decides.

A change found in a series (`detect`) starts `alert` (slower, larger), `improvement`, `pending`
(too few points after it to be sure) or `harness` (the step lies across a revision of this
provider's benchmark code). Then, in this order:

1. `baseline_provider`: a change of a provider that does not run Liger's code (torch,
   huggingface, ...) is `environment`. It is the control of the liger series beside it, never
   a verdict on that series.
2. `harness_suspect`: a step across a harness revision of liger's own path, where liger
   moved and the baselines measured on both sides did not, stays open with the revision named
   (`suspected`): the script change may explain it, and so may Liger's code.
3. `baselines_alike`: an open change whose baselines moved the same way by at least the
   minimum effect, and which moved less than that relative to them, is `environment`.
4. `full_only`: a step of the `full` pass that the same provider's `forward` and `backward`,
   measured on both sides, do not take is `environment` (`full` runs the code of the two).
5. `shared_step`: where `environment_kernels` or more kernels stepped at one commit on one
   kind of machine, the environment is suspected for each (`suspected = environment`), and a
   change is `environment` only if it moved as the other kernels of its class did there: the
   same metric and pass, and for speed the same side of `launch_bound_ns` (launch-bound
   kernels move with the toolchain and host, device-bound ones with the GPU). Its log ratio
   must lie within `class_tolerance` spreads of the class's level (the median over the other
   kernels of each one's median step; the spread, their scaled median absolute deviation, at
   least the minimum effect), with `class_min_peers` other kernels in the class. A kernel
   without enough peers, or unlike them, stays open: many kernels moving at once is evidence
   about them, not about it.
6. `confirmation` (`unconfirmed`): a change is announced once `confirm_points` points after it
   hold the new level (memory, deterministic: `memory_confirm_points`) and, for speed, once its
   z reaches `announce_z`: found at the detector's z, announced at a higher one (hysteresis),
   `pending` in between. An alert once announced (`hold_announced`) stays one while it is
   found at all: its z moving back under `announce_z` as the series' noise estimate moves is
   no evidence against it; only the rules above, or its step gone, take it back.

Every rule that weighed something writes it into the row's `evidence` (one clause each, in
this order), whether or not it changed the state; no rule silences a whole commit or kernel.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# States that say Liger's code may have changed; `environment` and `harness` say something else
# did, and are never alerts.
OPEN_STATES = frozenset({"alert", "improvement", "pending"})
ENVIRONMENT = "environment"
HARNESS = "harness"

# The rules' names, in order: docs/regressions.md describes each under the same name.
RULES = (
    "baseline_provider",
    "harness_suspect",
    "baselines_alike",
    "full_only",
    "shared_step",
    "confirmation",
)


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


def note(row: dict[str, Any], clause: str) -> None:
    """Add what a rule weighed to the row's evidence."""
    held = row.get("evidence")
    row["evidence"] = f"{held}; {clause}" if held else clause


def _x(ratio: float | None) -> str:
    return "x-" if ratio is None else f"x{ratio:.3g}"


# ----------------------------------------------------------------------------------- per series


@dataclass(frozen=True)
class SeriesEvidence:
    """What the rules of one series weigh: its step and its controls over the same points."""

    state: str
    liger: bool
    log_ratio: float
    effect: float  # log1p of the minimum effect of this metric
    baseline_ratio: float | None
    baselines: Sequence[str]
    full_only: bool | None  # None: not a `full` speed step, or nothing measured to say
    harness: str | None  # the revision a `harness` change lies across
    settled: bool = True  # a harness step: the later part holds it long enough (rule 6)


def judge_series(ev: SeriesEvidence) -> tuple[str, str | None, list[str]]:
    """Rules 2 to 4 on one change: (state, suspected cause, evidence clauses). Rule 1 runs
    over the rows after (`mark_baseline_steps`): the calibration's synthetic series name no
    provider and are judged as series alone."""
    state, suspected, said = ev.state, None, []
    direction = "alert" if ev.log_ratio > 0 else "improvement"
    base = None if ev.baseline_ratio is None else math.log(ev.baseline_ratio)
    if base is None:
        said.append("no baseline measured on both sides")
    else:
        said.append(f"baselines {', '.join(ev.baselines)} {_x(ev.baseline_ratio)}")
    if state == HARNESS and ev.liger:
        still = base is not None and abs(base) < ev.effect <= abs(ev.log_ratio)
        if still:
            said.append(f"harness revision {ev.harness} changed liger's path; the baselines held")
            if not ev.settled:
                said.append("too few points after it yet to announce (rule 6)")
                return "pending", f"harness {ev.harness}", said
            return direction, f"harness {ev.harness}", said
        said.append(f"harness revision {ev.harness} changed this provider's path")
        return state, None, said
    if state in OPEN_STATES and base is not None:
        relative = ev.log_ratio - base
        # The baselines moved the same way, by at least the minimum effect or half this
        # step (a step just over the minimum beside a baseline's just under it is one move).
        alike = base * ev.log_ratio > 0 and abs(base) >= min(ev.effect, abs(ev.log_ratio) / 2)
        if alike and abs(relative) < ev.effect:
            said.append(f"moved with its baselines ({_x(math.exp(relative))} relative)")
            return ENVIRONMENT, None, said
    if state in OPEN_STATES and ev.full_only:
        said.append("full pass only: forward and backward did not step")
        return ENVIRONMENT, None, said
    return state, suspected, said


# ------------------------------------------------------------------------------ across series


def mark_baseline_steps(rows: Sequence[dict[str, Any]]) -> None:
    """Rule 1: open changes of providers that do not run Liger's code are `environment`."""
    for r in rows:
        if r["state"] in OPEN_STATES and not is_liger(r["kernel"], r["provider"]):
            r["state"] = ENVIRONMENT
            note(r, "a baseline provider: the control of liger's series, not Liger's code")


@dataclass(frozen=True)
class ClassRule:
    kernels: int  # a step this many kernels share suspects the environment
    tolerance: float  # spreads around the class's level
    min_peers: int  # other kernels of the class needed to explain a step away
    launch_bound_ns: float
    min_effect: float
    memory_min_effect: float


def step_class(row: dict[str, Any], launch_bound_ns: float) -> tuple[Any, ...]:
    """The class a change is compared within at a shared step."""
    metric, mode = row.get("metric"), row.get("operation_mode")
    if metric == "memory":
        return (metric, mode, None)
    value = row.get("before_value")
    bound = None if value is None else ("launch" if value < launch_bound_ns else "device")
    return (metric, mode, bound)


def _log(row: dict[str, Any]) -> float | None:
    ratio = row.get("ratio")
    return math.log(ratio) if ratio and ratio > 0 else None


def class_keys(row: dict[str, Any], launch_bound_ns: float) -> list[tuple[Any, ...]]:
    """The classes a change is compared within, narrowest first: metric, pass and bound; then
    metric and pass; then the metric alone."""
    metric, mode, bound = step_class(row, launch_bound_ns)
    keys = [(metric, mode, bound), (metric, mode, None), (metric, None, None)]
    return list(dict.fromkeys(keys))


def class_levels(
    rows: Iterable[dict[str, Any]], step: Any, launch_bound_ns: float
) -> dict[tuple[Any, ...], dict[str, float]]:
    """Per (step, class), for every class of `class_keys`: each liger kernel's median log step
    there."""
    found: dict[tuple[Any, ...], dict[str, list[float]]] = {}
    for r in rows:
        lr = _log(r)
        if r["state"] == HARNESS or lr is None or not is_liger(r["kernel"], r.get("provider")):
            continue
        at = step(r)
        for cls in class_keys(r, launch_bound_ns):
            found.setdefault((at, *cls), {}).setdefault(r["kernel"], []).append(lr)
    return {k: {kern: statistics.median(v) for kern, v in ks.items()} for k, ks in found.items()}


def peers_of(
    row: dict[str, Any],
    levels: dict[tuple[Any, ...], dict[str, float]],
    at: Any,
    rule: ClassRule,
) -> tuple[tuple[Any, ...], dict[str, float]]:
    """The narrowest class with `min_peers` other kernels at the step (else the narrowest)."""
    keys = class_keys(row, rule.launch_bound_ns)
    for cls in keys:
        peers = levels.get((at, *cls), {})
        if sum(k != row["kernel"] for k in peers) >= rule.min_peers:
            return cls, peers
    return keys[0], levels.get((at, *keys[0]), {})


def judge_shared_step(
    row: dict[str, Any], cls: tuple[Any, ...], peers: dict[str, float], rule: ClassRule
) -> tuple[bool, str]:
    """Rule 5 on one open change at a shared step: (explained by its class, the clause)."""
    others = [v for k, v in peers.items() if k != row["kernel"]]
    own = _log(row)
    name = "/".join(str(c) for c in cls if c is not None)
    if own is None or len(others) < rule.min_peers:
        return False, (
            f"{row.get('kernels_at_step')} kernels stepped here; {len(others)} other kernel(s) "
            f"of class {name}, too few to explain it"
        )
    level = statistics.median(others)
    mad = statistics.median(abs(v - level) for v in others) * 1.4826
    effect = math.log1p(rule.memory_min_effect if row["metric"] == "memory" else rule.min_effect)
    spread = max(mad, effect)
    off = (own - level) / spread
    said = (
        f"{row.get('kernels_at_step')} kernels stepped here; class {name} moved "
        f"{_x(math.exp(level))} over {len(others)} other kernels (spread {_x(math.exp(spread))}), "
        f"this {_x(math.exp(own))}: {abs(off):.1f} spreads"
    )
    return abs(off) <= rule.tolerance, said


def unconfirmed(points_after: int, at_end: bool, need: int) -> bool:
    """Rule 6: a new level at the end of its series, held by fewer than `need` points so far,
    is `pending` (never announced) until more points hold it."""
    return at_end and points_after < need


def hold_announced(rows: Iterable[dict[str, Any]], announced: frozenset[str]) -> None:
    """Rule 6, once announced: a `pending` change whose current row is an announced `alert`
    stays `alert`. It is still found (at the detector's z, with its direction: the change id
    holds both), so what moved is the confirmation's margin, not the evidence for the step."""
    for row in rows:
        if row["state"] == "pending" and row["change_id"] in announced:
            row["state"] = "alert"
            note(row, "announced before and still found: held as an alert (rule 6)")
