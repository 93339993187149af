"""Catalog knowledge (GPUs, kernels, dtypes) kept as package data, not code.

Upstream CSVs name GPUs by `torch.cuda.get_device_name()` and carry kernel parameters by their
script-local names; the catalog turns both into the vocabulary our documents use. Lookups are
pure and cached: the normalizer calls them once per distinct value, not per row.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import rfc8785
from packaging.specifiers import SpecifierSet

from kindex_etl.contracts.versions import parse_version

_SEPARATORS = (" ", "-", "_")
# Every file whose content can move an identity: all of them enter the catalog version.
# variants.json is generated from upstream's scripts (`upstream_git.build_variants`); it moves
# identities, so it is part of the catalog version like the hand-kept files.
CATALOG_FILES = ("gpus.json", "kernels.json", "workloads.json", "protocols.json", "variants.json")


@dataclass(frozen=True)
class GpuInfo:
    vendor: str
    product: str
    architecture: str
    form_factor: str | None
    family: str | None = None


@dataclass(frozen=True)
class KernelInfo:
    name: str
    title: str
    default_dtype: str | None
    parameters: dict[str, str] = field(default_factory=dict)
    script: str | None = None
    # Providers liger is compared against, in order of preference (upstream renamed them).
    baseline: tuple[str, ...] = ()
    liger_provider: str = "liger"


@dataclass(frozen=True)
class KernelNamePattern:
    """A kernel name that embeds a parameter (`dyt_beta=True`): the kernel and the values."""

    id: str
    pattern: re.Pattern[str]
    values: dict[str, Any]

    def split(self, name: str) -> tuple[str, dict[str, Any]] | None:
        found = self.pattern.match(name)
        if found is None:
            return None
        groups = found.groupdict()
        kernel = groups.pop("kernel")
        return kernel, {k: self.values.get(v, v) for k, v in groups.items()}


def _versions(spec: str | None) -> SpecifierSet | None:
    return SpecifierSet(spec) if spec else None


def _in_range(spec: SpecifierSet | None, version: str) -> bool:
    if spec is None:
        return True
    parsed = parse_version(version)
    return parsed is not None and spec.contains(parsed, prereleases=True)


@dataclass(frozen=True)
class Variant:
    """One upstream benchmark variant: which of its keys are shapes, sweep bounds, or dead."""

    id: str
    kernels: frozenset[str]
    x_name: str
    keys: frozenset[str]
    versions: SpecifierSet | None
    parameters: dict[str, str]
    bounds: frozenset[str]
    dead: frozenset[str]

    def matches(self, kernel: str, x_name: str, keys: frozenset[str], version: str) -> bool:
        return (
            kernel in self.kernels
            and x_name == self.x_name
            and keys == self.keys
            and _in_range(self.versions, version)
        )


@dataclass(frozen=True)
class ProtocolVariant:
    """Where a kernel's script times or measures differently from the family's protocol."""

    id: str
    kernels: frozenset[str]
    metric: str
    modes: frozenset[str] | None
    versions: SpecifierSet | None
    name: str
    title: str
    timed: str | None
    notes: str | None

    def matches(self, kernel: str, metric: str, mode: str, version: str) -> bool:
        return (
            kernel in self.kernels
            and metric == self.metric
            and (self.modes is None or mode in self.modes)
            and _in_range(self.versions, version)
        )


@dataclass(frozen=True)
class Catalog:
    gpus: tuple[dict[str, Any], ...]
    vendor_prefixes: dict[str, tuple[str, ...]]
    kernels: dict[str, KernelInfo]
    parameters: dict[str, str]
    dtypes: dict[str, str]
    version: str = ""
    kernel_names: tuple[KernelNamePattern, ...] = ()
    variants: tuple[Variant, ...] = ()
    protocol_variants: tuple[ProtocolVariant, ...] = ()
    first_releases: dict[str, str] = field(default_factory=dict)
    releases: tuple[str, ...] = ()
    protocols: dict[str, Any] = field(default_factory=dict)

    def gpu(self, gpu_name: str) -> GpuInfo | None:
        """Place a device name; None when no entry matches (never guessed)."""
        best: dict[str, Any] | None = None
        for entry in self.gpus:
            match = entry["match"]
            if (
                gpu_name == match
                or (gpu_name.startswith(match) and gpu_name[len(match)] in _SEPARATORS)
            ) and (best is None or len(match) > len(best["match"])):
                best = entry
        if best is None:
            return None
        rest = gpu_name[len(best["match"]) :].strip(" -_")
        return GpuInfo(
            vendor=best["vendor"],
            product=best["product"],
            architecture=best["architecture"],
            form_factor=rest or None,
            family=best.get("family"),
        )

    def short_gpu_name(self, gpu_name: str, vendor: str) -> str:
        for prefix in self.vendor_prefixes.get(vendor, ()):
            if gpu_name.startswith(prefix):
                return gpu_name[len(prefix) :]
        return gpu_name

    def kernel(self, name: str) -> KernelInfo | None:
        return self.kernels.get(name)

    def parameter_name(self, kernel: str, key: str) -> str | None:
        """The meaning-name of a raw parameter, or None when the catalog does not know it."""
        info = self.kernels.get(kernel)
        if info is not None and key in info.parameters:
            return info.parameters[key]
        return self.parameters.get(key)

    def dtype(self, raw: str) -> str | None:
        return self.dtypes.get(raw)

    def split_kernel(self, name: str) -> tuple[str, dict[str, Any]]:
        """The catalog kernel a raw kernel_name stands for, and the parameters it embeds."""
        for pattern in self.kernel_names:
            found = pattern.split(name)
            if found is not None:
                return found
        return name, {}

    def variant(
        self, kernel: str, x_name: str, keys: frozenset[str], version: str
    ) -> Variant | None:
        for rule in self.variants:
            if rule.matches(kernel, x_name, keys, version):
                return rule
        return None

    def protocol_variant(
        self, kernel: str, metric: str, mode: str, version: str
    ) -> ProtocolVariant | None:
        for rule in self.protocol_variants:
            if rule.matches(kernel, metric, mode, version):
                return rule
        return None

    def earliest_label(self, kernel: str) -> str | None:
        """The oldest liger_version a row of this benchmark can honestly carry.

        Upstream's utils.py stamps rows with the installed liger-kernel version, and main between
        two tags still reports the older one: a benchmark first shipped in release N can carry
        N's predecessor, nothing older.
        """
        first = self.first_releases.get(kernel)
        if first is None:
            return None
        if first in self.releases:
            index = self.releases.index(first)
            return self.releases[max(index - 1, 0)]
        return first

    def predates_benchmark(self, kernel: str, version: str) -> bool:
        earliest = parse_version(self.earliest_label(kernel) or "")
        parsed = parse_version(version)
        return earliest is not None and parsed is not None and parsed < earliest


def _read_json(name: str, override_dir: Path | None) -> Any:
    if override_dir is not None and (override_dir / name).is_file():
        return json.loads((override_dir / name).read_text(encoding="utf-8"))
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


def load_catalog(override_dir: str | Path | None = None) -> Catalog:
    """Load the packaged catalog, or files of the same names from `override_dir`.

    The override lets an operator teach the pipeline a new GPU or kernel without a release,
    then replay the rows that were held back for it (`kindex-etl replay`).
    """
    directory = Path(override_dir) if override_dir else None
    if directory is not None and not directory.is_dir():
        # Silently falling back to the packaged catalog would make a replay "succeed" with
        # the very catalog that held the rows back.
        from kindex_etl.errors import CatalogError

        raise CatalogError(f"catalog directory {directory} does not exist")
    files = {name: _read_json(name, directory) for name in CATALOG_FILES}
    gpus, kernels, workloads = files["gpus.json"], files["kernels.json"], files["workloads.json"]
    return Catalog(
        gpus=tuple(gpus["gpus"]),
        vendor_prefixes={k: tuple(v["prefixes"]) for k, v in gpus["vendors"].items()},
        kernels={
            name: KernelInfo(
                name=name,
                title=spec["title"],
                default_dtype=spec.get("default_dtype"),
                parameters=dict(spec.get("parameters", {})),
                script=spec.get("script"),
                baseline=tuple(spec.get("baseline", ())),
                liger_provider=spec.get("liger_provider", "liger"),
            )
            for name, spec in kernels["kernels"].items()
        },
        parameters=dict(kernels["parameters"]),
        dtypes=dict(kernels["dtypes"]),
        version=catalog_version(files),
        kernel_names=tuple(
            KernelNamePattern(
                id=entry["id"], pattern=re.compile(entry["match"]), values=entry.get("values", {})
            )
            for entry in workloads["kernelNames"]
        ),
        variants=tuple(
            Variant(
                id=entry["id"],
                kernels=frozenset(entry["kernels"]),
                x_name=entry["x_name"],
                keys=frozenset(entry["keys"]),
                versions=_versions(entry.get("versions")),
                parameters=dict(entry.get("parameters", {})),
                bounds=frozenset(entry.get("bounds", ())),
                dead=frozenset(entry.get("dead", ())),
            )
            # The hand rules first: where both match a row, the one with cited lines wins.
            for entry in [*workloads["variants"], *files["variants.json"]["variants"]]
        ),
        protocol_variants=tuple(
            ProtocolVariant(
                id=entry["id"],
                kernels=frozenset(entry["kernels"]),
                metric=entry["metric"],
                modes=frozenset(entry["modes"]) if "modes" in entry else None,
                versions=_versions(entry.get("versions")),
                name=entry["name"],
                title=entry["title"],
                timed=entry.get("timed"),
                notes=entry.get("notes"),
            )
            for entry in workloads["protocols"]
        ),
        first_releases={
            k: v for k, v in workloads["firstReleases"].items() if not k.startswith("_")
        },
        releases=tuple(workloads["releases"]),
        protocols=files["protocols.json"],
    )


def catalog_version(files: dict[str, Any]) -> str:
    """`<catalogVersion>+<12 hex digits>`: the declared version and a digest of every file.

    The digest (sha256 over RFC 8785 JSON of all catalog files, by name) makes an override
    directory or a forgotten version bump visible: equal strings mean equal catalogs.
    """
    content = hashlib.sha256(rfc8785.dumps(files)).hexdigest()[:12]
    return f"{files['workloads.json']['catalogVersion']}+{content}"


@cache
def default_catalog() -> Catalog:
    from kindex_etl.config import settings

    return load_catalog(settings().catalog_dir)
