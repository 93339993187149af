"""How a campaign lays its work out: the A/B interleave, run ids, shards over hosts, GPUs.

- `interleave`: per script, the candidate V and the baseline V-1 alternate, repeat by repeat
  (V r1, V-1 r1, V r2, V-1 r2, ...), so slow drift of the host (clocks, temperature, neighbours)
  falls on both versions alike instead of on whichever ran second.
- `slots`: each (version, repeat) is its own upload with its own run id,
  `<campaign>-<version>-r<k>` (`-s<i>` added for shard i of several, which measure other
  scripts and upload apart): the warehouse then holds A/A pairs (r1 against r2 of one
  version: the noise) and A/B pairs (V against V-1 of one repeat: the difference).
- `balance`: longest-processing-time-first assignment of scripts to bins (shards of the
  campaign over hosts, or GPUs of a host) by their expected seconds, so bins finish together.
  Deterministic: every shard of a campaign computes the same split on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    version: str
    repeat: int  # 1-based
    run_id: str


def interleave(version: str, baseline: str | None, repeats: int) -> list[tuple[str, int]]:
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    versions = [version] if baseline is None else [version, baseline]
    return [(v, r) for r in range(1, repeats + 1) for v in versions]


def run_id(campaign_id: str, version: str, repeat: int, shard: tuple[int, int] = (0, 1)) -> str:
    index, count = shard
    return f"{campaign_id}-{version}-r{repeat}" + (f"-s{index}" if count > 1 else "")


def slots(
    campaign_id: str,
    version: str,
    baseline: str | None,
    repeats: int,
    shard: tuple[int, int] = (0, 1),
) -> list[Slot]:
    return [
        Slot(v, r, run_id(campaign_id, v, r, shard))
        for v, r in interleave(version, baseline, repeats)
    ]


def balance(weights: Sequence[tuple[str, float]], bins: int) -> list[list[str]]:
    """Names split into `bins` lists, heaviest first onto the lightest bin (ties: lower index)."""
    if bins < 1:
        raise ValueError(f"need at least one bin, not {bins}")
    loads = [0.0] * bins
    out: list[list[str]] = [[] for _ in range(bins)]
    for name, weight in sorted(weights, key=lambda nw: (-nw[1], nw[0])):
        i = min(range(bins), key=lambda b: (loads[b], b))
        out[i].append(name)
        loads[i] += weight
    return out


def shard(weights: Sequence[tuple[str, float]], index: int, count: int) -> list[str]:
    """The names shard `index` of `count` runs (see `balance`)."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index} of {count} does not exist")
    return balance(weights, count)[index]
