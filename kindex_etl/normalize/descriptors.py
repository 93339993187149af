"""Everything about a run that does not change from row to row, computed once per distinct value.

A *descriptor key* is the tuple of upstream fields that fixes a run's workload, implementation,
protocol and environment (all columns but timestamp and the y values). Real files repeat each
key many times, so the columnar normalizer resolves every distinct key here, in plain Python,
and broadcasts the result to its rows.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

from packaging.version import InvalidVersion, Version

from kindex_etl.catalog import Catalog
from kindex_etl.contracts.digests import canonical_json, digest
from kindex_etl.contracts.documents import (
    BenchmarkProtocol,
    ExecutionEnvironment,
    Implementation,
    Workload,
)
from kindex_etl.errors import Rejected
from kindex_etl.normalize.slugs import NAME_LIMIT, compact, slug, value_slug

# Identifiers that end up verbatim in externalIds must not be able to forge a path segment.
_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_INT = re.compile(r"^[+-]?\d+$")

UNKNOWN_KERNEL_LABEL = "kernelindex.dev/catalog"


class DescriptorKey(NamedTuple):
    kernel: str
    mode: str
    provider: str
    metric: str
    unit: str
    x_name: str
    x_label: str
    x_value: str
    config: str
    gpu_name: str
    liger_version: str
    software: str  # canonical JSON of the host facts a re-run recorded, "" for upstream rows


KEY_COLUMNS = (
    "kernel_name",
    "kernel_operation_mode",
    "kernel_provider",
    "metric_name",
    "metric_unit",
    "x_name",
    "x_label",
    "x_value",
    "extra_benchmark_config_str",
    "gpu_name",
    "liger_version",
)


@dataclass(frozen=True)
class Descriptor:
    key: DescriptorKey
    metric: str  # "speed" | "memory"
    series_id: str  # externalId without its timestamp segment
    name_prefix: str  # metadata.name before its timestamp slug
    title: str
    labels: dict[str, str]
    benchmark: str
    workload: dict[str, Any]
    implementation: dict[str, Any]
    protocol: dict[str, Any]
    environment: dict[str, Any]
    workload_digest: str
    implementation_digest: str
    protocol_digest: str
    environment_digest: str
    workload_canonical: str
    implementation_canonical: str
    workload_slug: str
    gpu_slug: str
    dtype: str | None
    known_kernel: bool


@cache
def _protocol_catalog() -> dict[str, Any]:
    text = resources.files("kindex_etl.catalog").joinpath("protocols.json").read_text("utf-8")
    catalog: dict[str, Any] = json.loads(text)
    return catalog


def parse_scalar(text: str) -> int | float | str:
    """x_value as the script wrote it: an int, a finite float, or a string (a config name)."""
    stripped = text.strip()
    if _INT.match(stripped):
        return int(stripped)
    try:
        number = float(stripped)
    except ValueError:
        return text
    if not math.isfinite(number):
        return text
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def _normalize_config_value(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def protocol_document(metric: str, mode: str) -> BenchmarkProtocol:
    cat = _protocol_catalog()
    spec = cat["metrics"][metric]
    mode_info = cat["modes"].get(mode)
    if mode_info is None:
        mode_title = mode
        timed = cat["unknown_mode"]["timed"].format(mode=mode)
    else:
        mode_title, timed = mode_info["title"], mode_info["timed"]
    return BenchmarkProtocol.model_validate(
        {
            "metadata": {
                "name": spec["name"].format(mode=slug(mode_title)),
                "title": spec["title"].format(mode=mode_title),
            },
            "spec": {
                "harness": cat["harness"],
                "measurement": spec["measurement"],
                "comparability": {
                    "notes": spec["notes"].format(timed=timed),
                    "family": cat["family"],
                },
            },
        }
    )


def metric_units() -> dict[str, str]:
    return {name: spec["unit"] for name, spec in _protocol_catalog()["metrics"].items()}


def environment_document(catalog: Catalog, gpu_name: str, software: str) -> ExecutionEnvironment:
    gpu = catalog.gpu(gpu_name)
    if gpu is None:
        raise Rejected("unknown_gpu", f"the GPU catalog cannot place {gpu_name!r}")
    facts = json.loads(software) if software else {}
    return ExecutionEnvironment.model_validate(
        {
            "metadata": {
                "name": f"liger-bench-{slug(gpu_name)}",
                "title": "Liger benchmark host · " + catalog.short_gpu_name(gpu_name, gpu.vendor),
            },
            "spec": {
                "hardware": {
                    "vendor": gpu.vendor,
                    "product": gpu.product,
                    "formFactor": gpu.form_factor,
                    "architecture": gpu.architecture,
                },
                "software": {str(k): str(v) for k, v in facts.items()},
            },
        }
    )


def _workload(catalog: Catalog, key: DescriptorKey) -> tuple[Workload, str, str | None]:
    if key.config.strip():
        try:
            config = json.loads(key.config)
        except json.JSONDecodeError as exc:
            raise Rejected("bad_config", f"extra_benchmark_config_str is not JSON: {exc}") from None
        if not isinstance(config, dict):
            raise Rejected("bad_config", "extra_benchmark_config_str is not a JSON object")
    else:
        config = {}
    kernel = catalog.kernel(key.kernel)
    raw_dtype = config.pop("dtype", None)
    dtype: str | None
    if raw_dtype is not None:
        dtype = catalog.dtype(str(raw_dtype)) or compact(str(raw_dtype))
    else:
        dtype = kernel.default_dtype if kernel else None

    x_value = parse_scalar(key.x_value)
    parameters: dict[str, Any] = {
        str(k): _normalize_config_value(v) for k, v in config.items() if v is not None
    }
    parameters[key.x_name] = x_value
    # Meaning-names for the slug; a clash falls back to the raw name so slugs stay distinct.
    words: dict[str, str] = {}
    for raw in sorted(parameters):
        word = catalog.parameter_name(key.kernel, raw) or compact(raw) or "param"
        if word in words.values():
            word = compact(raw) + "raw"
        words[raw] = word
    tokens = sorted(
        (words[raw], value_slug(value))
        for raw, value in parameters.items()
        if not isinstance(value, dict | list)
    ) + sorted(
        (words[raw], value_slug(canonical_json(value).decode()))
        for raw, value in parameters.items()
        if isinstance(value, dict | list)
    )
    workload_slug = "-".join(f"{word}{value}" for word, value in sorted(tokens))
    if dtype:
        workload_slug = f"{workload_slug}-{dtype}" if workload_slug else dtype
    workload = Workload.model_validate(
        {
            "spec": {
                "kernel": key.kernel,
                "parameters": parameters,
                "dtype": dtype,
                "sweep": {
                    "name": words[key.x_name],
                    "source": key.x_name,
                    "label": key.x_label,
                    "value": x_value,
                },
            }
        }
    )
    return workload, workload_slug, dtype


@dataclass(frozen=True)
class Hashed:
    """A document or descriptor with its canonical JSON and digest, computed once."""

    doc: dict[str, Any]
    canonical: str
    digest: str

    @classmethod
    def of(cls, doc: dict[str, Any]) -> Hashed:
        return cls(doc=doc, canonical=canonical_json(doc).decode(), digest=digest(doc))


class Resolver:
    """Resolves descriptor keys, sharing the parts keys have in common.

    Many keys share a protocol (metric, mode), an environment (GPU, software), a workload
    (kernel and shape) or an implementation (provider, version): each is built and hashed once.
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._protocols: dict[tuple[str, str], Hashed] = {}
        self._environments: dict[tuple[str, str], Hashed | Rejected] = {}
        self._workloads: dict[tuple[str, ...], tuple[Hashed, str, str | None] | Rejected] = {}
        self._implementations: dict[tuple[str, str, str], Hashed] = {}

    def protocol(self, metric: str, mode: str) -> Hashed:
        key = (metric, mode)
        if key not in self._protocols:
            self._protocols[key] = Hashed.of(protocol_document(metric, mode).document())
        return self._protocols[key]

    def environment(self, gpu_name: str, software: str) -> Hashed:
        key = (gpu_name, software)
        if key not in self._environments:
            try:
                env = environment_document(self.catalog, gpu_name, software)
                self._environments[key] = Hashed.of(env.document())
            except Rejected as rejected:
                self._environments[key] = rejected
        found = self._environments[key]
        if isinstance(found, Rejected):
            raise found
        return found

    def workload(self, key: DescriptorKey) -> tuple[Hashed, str, str | None]:
        wkey = (key.kernel, key.x_name, key.x_label, key.x_value, key.config)
        if wkey not in self._workloads:
            try:
                workload, slug_, dtype = _workload(self.catalog, key)
                self._workloads[wkey] = (Hashed.of(workload.document()), slug_, dtype)
            except Rejected as rejected:
                self._workloads[wkey] = rejected
        found = self._workloads[wkey]
        if isinstance(found, Rejected):
            raise found
        return found

    def implementation(self, provider: str, kernel: str, version: str) -> Hashed:
        key = (provider, kernel, version)
        if key not in self._implementations:
            impl = Implementation.model_validate(
                {"spec": {"provider": provider, "kernel": kernel, "ligerVersion": version}}
            )
            self._implementations[key] = Hashed.of(impl.document())
        return self._implementations[key]

    def resolve(self, key: DescriptorKey) -> Descriptor:
        """Build the descriptor for a key, or raise Rejected with the reason to hold it back."""
        _check_fields(key)
        environment = self.environment(key.gpu_name, key.software)
        workload, workload_slug, dtype = self.workload(key)
        protocol = self.protocol(key.metric, key.mode)
        implementation = self.implementation(key.provider, key.kernel, key.liger_version)
        kernel = self.catalog.kernel(key.kernel)
        mode = key.mode or "unspecified"
        gpu_slug = slug(key.gpu_name)
        series = f"{key.kernel}/{mode}/{key.provider}/{gpu_slug}/{workload_slug}"
        labels = {"liger_version": key.liger_version}
        if kernel is None:
            labels[UNKNOWN_KERNEL_LABEL] = "unknown-kernel"
        title = f"{kernel.title if kernel else key.kernel} · {key.provider} · {mode}"
        name_parts = [key.kernel, mode, key.provider, gpu_slug, workload_slug]
        if key.metric == "memory":
            # Memory rows share everything with a speed row but the metric: give them their
            # own externalId shape (one more segment) and a name and title that say so.
            series += "/memory"
            name_parts.insert(2, "memory")
            title += " · peak memory"
        return Descriptor(
            key=key,
            metric=key.metric,
            series_id=series,
            name_prefix=slug("-".join(("liger", *name_parts))),
            title=title,
            labels=labels,
            benchmark=f"{key.kernel}/{mode}",
            workload=workload.doc,
            implementation=implementation.doc,
            protocol=protocol.doc,
            environment=environment.doc,
            workload_digest=workload.digest,
            implementation_digest=implementation.digest,
            protocol_digest=protocol.digest,
            environment_digest=environment.digest,
            workload_canonical=workload.canonical,
            implementation_canonical=implementation.canonical,
            workload_slug=workload_slug,
            gpu_slug=gpu_slug,
            dtype=dtype,
            known_kernel=kernel is not None,
        )


def _check_fields(key: DescriptorKey) -> None:
    for column, value in (
        ("kernel_name", key.kernel),
        ("kernel_provider", key.provider),
        ("metric_name", key.metric),
        ("x_name", key.x_name),
        ("x_value", key.x_value),
        ("gpu_name", key.gpu_name),
        ("liger_version", key.liger_version),
    ):
        if not value.strip():
            raise Rejected("missing_field", f"{column} is empty")
    for column, value in (
        ("kernel_name", key.kernel),
        ("kernel_provider", key.provider),
        ("kernel_operation_mode", key.mode),
    ):
        if value and not _IDENTIFIER.match(value):
            raise Rejected("bad_identifier", f"{column} {value!r} is not a plain identifier")
    units = metric_units()
    if key.metric not in units:
        raise Rejected(
            "unknown_metric", f"metric_name {key.metric!r} is not one of {sorted(units)}"
        )
    if key.unit != units[key.metric]:
        raise Rejected(
            "unknown_metric", f"{key.metric} in {key.unit!r}, expected {units[key.metric]!r}"
        )
    try:
        Version(key.liger_version)
    except InvalidVersion:
        raise Rejected(
            "bad_version", f"liger_version {key.liger_version!r} is not PEP 440"
        ) from None


def resolve(catalog: Catalog, key: DescriptorKey) -> Descriptor:
    return Resolver(catalog).resolve(key)


def run_name(descriptor: Descriptor, timestamp_slug: str) -> str:
    return f"{descriptor.name_prefix}-{timestamp_slug}"[:NAME_LIMIT].rstrip("-")
