"""Which providers liger was measured against, per kernel and release: `baseline_for`.

A baseline is a fact of each release's benchmark script, not of the kernel: dpo_loss and
poly_norm ran `huggingface` until upstream's #1223 (2026-05, inside 0.8.0's span) and `torch`
since. `baselines.json` is generated with `history.json` and `harness.json` from upstream's
git by `scripts/catalog_history.py` (`upstream_git.build_baselines`): per kernel name as the
scripts write it and per release tag, the non-liger providers the script ran while the package
reported that release. Never edit it by hand.

`baseline_for(kernel, release)` answers for a kernel as the warehouse names it (`dyt`, not
`dyt_beta=True`; `mhc_pre` through the script's `mhc_*`) and a `liger_version` (`0.6.4`):
the release's entry, else the newest earlier release's, else the kernel's first. A kernel the
generated file does not know falls back to `kernels.json`'s hand-kept `baseline`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from . import Catalog, default_catalog


def _version(tag: str) -> Version | None:
    try:
        return Version(tag.removeprefix("v"))
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class Baselines:
    # kernel name or pattern as the scripts write it -> (release version, providers), in order
    kernels: dict[str, tuple[tuple[Version, tuple[str, ...]], ...]]
    catalog: Catalog

    @classmethod
    def of(cls, doc: dict[str, Any], catalog: Catalog | None = None) -> Baselines:
        kernels: dict[str, tuple[tuple[Version, tuple[str, ...]], ...]] = {}
        for name, rows in doc["kernels"].items():
            entries = []
            for r in rows:
                version = _version(r["release"])
                if version is not None:
                    entries.append((version, tuple(r["baselines"])))
            kernels[name] = tuple(sorted(entries))
        return cls(kernels, catalog or default_catalog())

    def _names(self, kernel: str) -> list[str]:
        """The generated names that stand for `kernel` (patterns resolved, and a name that
        embeds a parameter, `dyt_beta=*`, mapped to its kernel through `workloads.json`)."""
        found = []
        for name in self.kernels:
            if name == kernel or fnmatch.fnmatchcase(kernel, name):
                found.append(name)
            elif "*" in name:
                for pattern in self.catalog.kernel_names:
                    for value in pattern.values:
                        split = pattern.split(name.replace("*", value))
                        if split is not None and split[0] == kernel and name not in found:
                            found.append(name)
        return found

    def known(self, kernel: str) -> bool:
        return bool(self._names(kernel))

    def for_release(self, kernel: str, release: str | None) -> tuple[str, ...]:
        """The providers liger's `kernel` was measured against while the package reported
        `release`; every release's together when `release` is None or not a version."""
        names = self._names(kernel)
        if not names:
            info = self.catalog.kernel(kernel)
            return info.baseline if info is not None else ()
        entries = sorted(e for n in names for e in self.kernels[n])
        wanted = _version(release) if release else None
        chosen: list[tuple[str, ...]] = [p for _, p in entries]
        if wanted is not None and entries:
            earlier = [v for v, _ in entries if v <= wanted]
            # The release's own entry, else the newest before it (a version between tags, or
            # newer than the last), else the first (a run labelled older than its script).
            at = max(earlier) if earlier else entries[0][0]
            chosen = [p for v, p in entries if v == at]
        out: list[str] = []
        for providers in chosen:
            out += [p for p in providers if p not in out]
        return tuple(out)

    def ever(self, kernel: str) -> tuple[str, ...]:
        """Every provider liger's `kernel` was ever measured against, oldest first."""
        return self.for_release(kernel, None)

    def catalog_with_every_baseline(self) -> Catalog:
        """The catalog with each known kernel's `baseline` set to `ever(kernel)`: for code that
        takes a catalog and compares liger with every baseline the rows hold (the analysis'
        `compare_baseline`); keep only each release's own with `for_release` afterwards."""
        kernels = {
            name: dataclasses.replace(info, baseline=self.ever(name)) if self.known(name) else info
            for name, info in self.catalog.kernels.items()
        }
        return dataclasses.replace(self.catalog, kernels=kernels)


def load_baselines(path: Path | None = None, catalog: Catalog | None = None) -> Baselines:
    if path is None and catalog is None:
        return _packaged()
    text = (
        Path(path).read_text()
        if path is not None
        else resources.files("kindex_etl.catalog").joinpath("baselines.json").read_text()
    )
    return Baselines.of(json.loads(text), catalog)


@cache
def _packaged() -> Baselines:
    text = resources.files("kindex_etl.catalog").joinpath("baselines.json").read_text()
    return Baselines.of(json.loads(text))


@cache
def release_baselines() -> tuple[Catalog, Callable[[str, str | None], tuple[str, ...]]]:
    """For code that compares through a catalog (the report's use of the analysis'
    `compare_baseline`): the packaged catalog with every baseline a kernel ever had, and
    `baseline_for` to keep, per row, the baselines of the row's own release."""
    packaged = _packaged()
    return packaged.catalog_with_every_baseline(), packaged.for_release


def baseline_for(kernel: str, release: str | None) -> tuple[str, ...]:
    """The providers liger's `kernel` was measured against at `release` (a `liger_version`),
    from the packaged `baselines.json` and catalog; `()` when none is known."""
    return _packaged().for_release(kernel, release)
