"""Catalog knowledge (GPUs, kernels, dtypes) kept as package data, not code.

Upstream CSVs name GPUs by `torch.cuda.get_device_name()` and carry kernel parameters by their
script-local names; the catalog turns both into the vocabulary our documents use. Lookups are
pure and cached: the normalizer calls them once per distinct value, not per row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

_SEPARATORS = (" ", "-", "_")


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


@dataclass(frozen=True)
class Catalog:
    gpus: tuple[dict[str, Any], ...]
    vendor_prefixes: dict[str, tuple[str, ...]]
    kernels: dict[str, KernelInfo]
    parameters: dict[str, str]
    dtypes: dict[str, str]

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
    gpus = _read_json("gpus.json", directory)
    kernels = _read_json("kernels.json", directory)
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
            )
            for name, spec in kernels["kernels"].items()
        },
        parameters=dict(kernels["parameters"]),
        dtypes=dict(kernels["dtypes"]),
    )


@cache
def default_catalog() -> Catalog:
    from kindex_etl.config import settings

    return load_catalog(settings().catalog_dir)
