"""How much a series moves when nothing changed: the noise model.

Every run carries its own spread: p20 and p80 of its repeats inside one benchmark call. For a
normal spread, p80 - p20 is 2 x 0.8416 standard deviations, so in log space a run's
within-run sigma is ln(p80 / p20) / 1.683. Upstream's own history shows that this understates
run-to-run noise (two runs of one commit on one GPU model moved far more than their p20-p80
bands), so a run's noise is

    sigma_run = sqrt((run_to_run * within)^2 + floor^2)

with `run_to_run` and `floor` fitted by maximum likelihood on A/A pairs (two runs of the same
release on the same machine: our re-runs' repeats, same-version rows of the history), see
`calibration`. Where a series has several runs of one release, their pooled spread is a
direct measurement of the same thing and the larger of the two is used. Memory is
deterministic: its noise is zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# 2 x the 80th percentile of the standard normal: p80 - p20 in standard deviations.
P20_P80_SIGMAS = 2 * 0.8416212335729143

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class NoiseModel:
    run_to_run: float = 1.0
    floor: float = 0.01

    def run_sigma(self, within: FloatArray) -> FloatArray:
        """Log-space run-to-run sigma of runs whose within-run sigma is `within`."""
        return np.sqrt((self.run_to_run * within) ** 2 + self.floor**2)


def within_sigma(p20: FloatArray, p80: FloatArray) -> FloatArray:
    """ln(p80 / p20) / 1.683 per run; 0 where the band is missing or degenerate."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(p80 / p20) / P20_P80_SIGMAS
    return np.where(np.isfinite(out) & (out > 0), out, 0.0)


def pooled_sigma(values: FloatArray, groups: npt.NDArray[np.int64]) -> float | None:
    """Pooled within-group standard deviation of `values` (groups: sorted ids); None if no
    group has two members."""
    if len(values) < 2:
        return None
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    counts = np.diff(np.r_[starts, len(values)])
    if not (counts > 1).any():
        return None
    means = np.add.reduceat(values, starts) / counts
    dev = values - np.repeat(means, counts)
    dof = int((counts - 1).sum())
    return math.sqrt(float((dev**2).sum()) / dof)


def fit(
    log_a: FloatArray,
    log_b: FloatArray,
    within_a: FloatArray,
    within_b: FloatArray,
    *,
    floors: tuple[float, ...] = (0.0025, 0.005, 0.01, 0.02, 0.04),
    factors: tuple[float, ...] = tuple(np.round(np.arange(0.25, 6.01, 0.25), 2)),
) -> NoiseModel:
    """Maximum-likelihood `run_to_run` and `floor` from A/A pairs of log medians.

    Under the model, log_a - log_b is normal with variance sigma_a^2 + sigma_b^2.
    """
    diff = log_a - log_b
    best: tuple[float, NoiseModel] | None = None
    for floor in floors:
        for factor in factors:
            model = NoiseModel(float(factor), float(floor))
            var = model.run_sigma(within_a) ** 2 + model.run_sigma(within_b) ** 2
            ll = float(-0.5 * (np.log(var) + diff**2 / var).sum())
            if best is None or ll > best[0]:
                best = (ll, model)
    assert best is not None
    return best[1]
