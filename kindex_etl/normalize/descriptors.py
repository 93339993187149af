"""Everything about a run that does not change from row to row, computed once per distinct value.

A *descriptor key* is the tuple of upstream fields that fixes a run's workload, implementation,
protocol and environment (all columns but timestamp and the y values). Real files repeat each
key many times, so the columnar normalizer resolves every distinct key here, in plain Python,
and broadcasts the result to its rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import rfc8785
from packaging.version import InvalidVersion, Version

from kindex_etl.catalog import Catalog, KernelInfo, ProtocolVariant
from kindex_etl.contracts import device_protocol as device_time
from kindex_etl.contracts.digests import canonical_json, digest
from kindex_etl.contracts.documents import (
    BenchmarkProtocol,
    ExecutionEnvironment,
    Implementation,
    Workload,
)
from kindex_etl.contracts.versions import canonical_version
from kindex_etl.errors import Rejected
from kindex_etl.normalize.slugs import NAME_LIMIT, compact, slug, value_slug

# Identifiers that end up verbatim in externalIds must not be able to forge a path segment.
_IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_INT = re.compile(r"^[+-]?\d+$")
_JSON_SAFE_INT = 2**53
_HASHED_KEYS = {"apiVersion", "kind", "spec"}  # what `digest` hashes of a document

UNKNOWN_KERNEL_LABEL = "kernelindex.dev/catalog"
# A liger_version older than the release before the benchmark's first: flagged, not trusted.
VERSION_LABEL = "kernelindex.dev/liger-version"


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


# Not frozen: a frozen dataclass sets each of its 26 fields through object.__setattr__, ~2 us
# more per descriptor, and an ingest of real history makes one per ~16 rows. Nothing mutates
# one once resolved. Slots make each 64 bytes smaller (248 against 312, tracemalloc).
@dataclass(slots=True)
class Descriptor:
    key: DescriptorKey
    metric: str  # "speed" | "memory" (key.metric: the CSV's metric_name)
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
    kernel: str = ""  # the catalog kernel; key.kernel is the raw kernel_name
    variant: str | None = None  # the workload variant rule that applied
    catalog_version: str = ""
    device: bool = False  # a device-time run (MetricKind.device_method): its row has extras
    # Indices of its shared part, workload, protocol and implementation in its resolver's
    # `Parts` (-1: resolved by no resolver's registry): what the columnar normalizer makes a
    # batch's descriptor columns from, one row per part instead of one per descriptor.
    parts: tuple[int, int, int, int] = (-1, -1, -1, -1)


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


def protocol_document(
    metric: str,
    mode: str,
    variant: ProtocolVariant | None = None,
    protocols: dict[str, Any] | None = None,
) -> BenchmarkProtocol:
    """The protocol of a (metric, pass); a catalog protocol variant where the script differs."""
    cat = protocols or _protocol_catalog()
    spec = cat["metrics"][metric]
    mode_info = cat["modes"].get(mode)
    if mode_info is None:
        mode_title = mode
        timed = cat["unknown_mode"]["timed"].format(mode=mode)
    else:
        mode_title, timed = mode_info["title"], mode_info["timed"]
    name, title, notes = spec["name"], spec["title"], spec["notes"]
    if variant is not None:
        name, title = variant.name, variant.title
        timed = variant.timed or timed
        notes = variant.notes or notes
    return BenchmarkProtocol.model_validate(
        {
            "metadata": {
                "name": name.format(mode=slug(mode_title)),
                "title": title.format(mode=mode_title),
            },
            "spec": {
                "harness": cat["harness"],
                "measurement": spec["measurement"],
                "comparability": {
                    "notes": notes.format(timed=timed),
                    "family": cat["family"],
                },
            },
        }
    )


def metric_units(protocols: dict[str, Any] | None = None) -> dict[str, str]:
    """metric_name -> its unit: upstream's metrics and our re-runs' device-time ones."""
    cat = protocols or _protocol_catalog()
    units = {name: spec["unit"] for name, spec in cat["metrics"].items()}
    device = cat.get("deviceTime")
    if device is not None:
        units.update(dict.fromkeys(device_time.metric_methods(cat), device["unit"]))
    return units


@dataclass(frozen=True)
class MetricKind:
    """What a CSV metric_name makes of a run: its metric (`speed` or `memory`), the segment its
    externalId has before the timestamp (none for speed, the seed's form), and the words its
    name and title add. Device time (`device_time.<method>.v<version>`) is speed timed by
    another protocol: its runs are `speed` runs whose externalId says which timer."""

    metric: str
    suffix: str = ""  # "/<segment>" of the externalId and series id
    name_part: str = ""  # inserted into metadata.name after the pass
    title: str = ""  # appended to the title
    device_method: str | None = None  # device time's method: its protocol document


def metric_kind(metric_name: str, protocols: dict[str, Any] | None = None) -> MetricKind:
    if metric_name == "memory":
        # Memory rows share everything with a speed row but the metric: their own externalId
        # shape (one more segment) and a name and title that say so.
        return MetricKind("memory", "/memory", "memory", " · peak memory")
    cat = protocols or _protocol_catalog()
    method = device_time.metric_methods(cat).get(metric_name) if "deviceTime" in cat else None
    if method is not None:
        # A device-time twin shares kernel, pass, provider, workload and timestamp with the
        # upstream-timer row of its point: the segment (the metric name's slug, which names
        # method and protocol version) keeps the two externalIds, and the series, apart.
        return MetricKind(
            cat["deviceTime"]["metric"],
            "/" + slug(metric_name),
            "device-time",
            f" · device time ({method.replace('_', ' ')})",
            method,
        )
    return MetricKind(metric_name)


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


def _config(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Rejected("bad_config", f"extra_benchmark_config_str is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise Rejected("bad_config", "extra_benchmark_config_str is not a JSON object")
    return config


@dataclass(frozen=True)
class ResolvedWorkload:
    hashed: Hashed
    slug: str
    dtype: str | None
    kernel: str  # the catalog kernel, after a name-embedded parameter was split off
    variant: str | None  # the catalog variant that named the keys; None when none matched
    key: DescriptorKey  # the first key resolved to it: its workload fields are every one's
    index: int = -1  # in `Parts.workloads`
    name_tail: str = ""  # `name_tail(slug)`


def _workload(catalog: Catalog, key: DescriptorKey) -> tuple[Workload, str, str | None, str | None]:
    """The Workload descriptor, its slug, dtype and the id of the variant rule that applied.

    Parameters are keyed by meaning-name, so two script versions that name a shape differently
    hash alike; a matched variant's sweep bounds and dead keys are left out (the runs table
    keeps the raw config). Without a matching variant every key stays, as before.
    """
    kernel_name, embedded = catalog.split_kernel(key.kernel)
    config = _config(key.config)
    for name, value in embedded.items():
        if name in config and config[name] != value:
            raise Rejected(
                "bad_config",
                f"kernel_name {key.kernel!r} says {name}={value!r}, the config {config[name]!r}",
            )
    variant = catalog.variant(kernel_name, key.x_name, frozenset(config), key.liger_version)
    kernel = catalog.kernel(kernel_name)
    raw_dtype = config.pop("dtype", None)
    dtype: str | None
    if raw_dtype is not None:
        dtype = catalog.dtype(str(raw_dtype)) or compact(str(raw_dtype))
    else:
        dtype = kernel.default_dtype if kernel else None

    merged = {**embedded, **config}
    if variant is not None:
        merged = {k: v for k, v in merged.items() if k not in variant.bounds | variant.dead}
    x_value = parse_scalar(key.x_value)
    raw_parameters: dict[str, Any] = {
        str(k): _normalize_config_value(v) for k, v in merged.items() if v is not None
    }
    # The swept x wins over a config key of the same name (the setup reads x, not the default).
    raw_parameters[key.x_name] = x_value
    # Meaning-names; a clash (unknown variants only) falls back to the raw name.
    words: dict[str, str] = {}
    for raw in sorted(raw_parameters):
        word = (
            (variant.parameters.get(raw) if variant is not None else None)
            or catalog.parameter_name(kernel_name, raw)
            or compact(raw)
            or "param"
        )
        if word in words.values():
            word = compact(raw) + "raw"
        words[raw] = word
    parameters = {words[raw]: value for raw, value in raw_parameters.items()}
    tokens = sorted(
        (word, value_slug(value))
        for word, value in parameters.items()
        if not isinstance(value, dict | list)
    ) + sorted(
        (word, value_slug(canonical_json(value).decode()))
        for word, value in parameters.items()
        if isinstance(value, dict | list)
    )
    workload_slug = "-".join(f"{word}{value}" for word, value in sorted(tokens))
    if dtype:
        workload_slug = f"{workload_slug}-{dtype}" if workload_slug else dtype
    workload = Workload.model_validate(
        {"spec": {"kernel": kernel_name, "parameters": parameters, "dtype": dtype}}
    )
    return workload, workload_slug, dtype, variant.id if variant is not None else None


@dataclass(frozen=True)
class Hashed:
    """A document or descriptor with its canonical JSON and digest, computed once."""

    doc: dict[str, Any]
    canonical: str
    digest: str

    @classmethod
    def of(cls, doc: dict[str, Any], *, reason: str = "bad_config") -> Hashed:
        """Hash `doc`; what RFC 8785 cannot canonicalize is the row's fault, held back as `reason`.

        rfc8785 refuses NaN, infinities and integers beyond 2**53 (I-JSON): a digest of such a
        document could not be recomputed by anyone else, so the row cannot become a run.
        """
        try:
            canonical = canonical_json(doc)
        except (rfc8785.CanonicalizationError, ValueError, TypeError, RecursionError) as exc:
            raise Rejected(reason, f"not canonicalizable as RFC 8785 JSON: {exc}") from None
        if doc.keys() == _HASHED_KEYS:
            # No metadata (workloads, implementations): the digest hashes these same bytes.
            return cls(doc, canonical.decode(), "sha256:" + hashlib.sha256(canonical).hexdigest())
        return cls(doc=doc, canonical=canonical.decode(), digest=digest(doc))


def labels_of(shared: SharedPart, matched: bool) -> dict[str, str]:
    """A run's metadata.labels: its release, and flags for what the catalog did not know
    (`matched`: whether its workload matched a catalog variant)."""
    labels = {"liger_version": shared.key.liger_version}
    if shared.kernel is None:
        labels[UNKNOWN_KERNEL_LABEL] = "unknown-kernel"
    elif not matched:
        labels[UNKNOWN_KERNEL_LABEL] = "unknown-variant"
    if shared.predates is not None:
        labels[VERSION_LABEL] = shared.predates
    return labels


def name_head(parts: tuple[str, ...]) -> str:
    """slug("liger-" + "-".join(parts)), or "" when a part is not ASCII (see name_prefix)."""
    return slug("-".join(("liger", *parts))) if all(p.isascii() for p in parts) else ""


def name_tail(workload_slug: str) -> str:
    """The slug of a workload slug, or "\0" when it is not ASCII (see name_prefix)."""
    return slug(workload_slug) if workload_slug.isascii() else "\0"


def name_prefix(parts: tuple[str, ...], head: str, workload_slug: str, tail: str) -> str:
    """slug("liger-" + "-".join((*parts, workload_slug))), from `name_head(parts)` and
    `name_tail(workload_slug)`, each computed once per shared part and per workload.

    A slug is the text's alphanumeric runs joined by '-', and '-' ends a run: so on ASCII
    text the slug of a join is the join of its parts' non-empty slugs. The workload slug
    is what differs between keys of one (kernel, pass, provider, GPU).
    """
    if not head or tail == "\0":  # non-ASCII: lower() may not map it one to one
        return slug("-".join(("liger", *parts, workload_slug)))
    return f"{head}-{tail}" if tail else head


# (kernel, x_name, x_value, config, liger_version) of a DescriptorKey, in one C call.
_workload_key = operator.itemgetter(0, 5, 7, 8, 10)


class Resolver:
    """Resolves descriptor keys, sharing the parts keys have in common.

    Many keys share a protocol (metric, mode), an environment (GPU, software), a workload
    (kernel and shape) or an implementation (provider, version): each is built and hashed once.
    """

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        # Protocols and implementations by key: their index in `parts`.
        self._protocols: dict[tuple[str, str, str], int] = {}
        self._environments: dict[tuple[str, str], Hashed | Rejected] = {}
        self._workloads: dict[tuple[str, ...], ResolvedWorkload | Rejected] = {}
        self._implementations: dict[tuple[str, str, str], int] = {}
        # Pure functions of one field or two, met once per descriptor key: on data as varied
        # as the real history keys are ~6 % of the rows, so parsing a version or matching the
        # catalog's rules again for each key was most of resolve()'s time.
        self._kernel_names: dict[str, str] = {}
        self._version_problems: dict[str, Rejected | None] = {}
        self._protocol_keys: dict[tuple[str, str, str, str], tuple[str, str, str]] = {}
        self._predates: dict[tuple[str, str], bool] = {}
        self._gpu_slugs: dict[str, str] = {}
        self._shared: dict[tuple[str, ...], SharedPart | tuple[bool, Rejected]] = {}
        self._units = metric_units(catalog.protocols or None)
        self.parts = Parts()

    def protocol(self, metric: str, mode: str, kernel: str = "", version: str = "") -> Hashed:
        return self.parts.protocols[self._protocol_part(metric, mode, kernel, version)]

    def _protocol_part(self, metric: str, mode: str, kernel: str, version: str) -> int:
        rule = (metric, mode, kernel, version)
        key = self._protocol_keys.get(rule)
        if key is None:
            variant = self.catalog.protocol_variant(kernel, metric, mode, version)
            key = self._protocol_keys[rule] = (metric, mode, variant.id if variant else "")
        index = self._protocols.get(key)
        if index is None:
            variant = self.catalog.protocol_variant(kernel, metric, mode, version)
            protocols = self.catalog.protocols or None
            method = metric_kind(metric, protocols).device_method
            if method is not None:
                # Our device timer's document, as the re-run recorded it (device_time.py).
                raw = device_time.protocol_document(method, mode, protocols)
                document = BenchmarkProtocol.model_validate(raw).document()
            else:
                document = protocol_document(metric, mode, variant, protocols).document()
            index = self._protocols[key] = len(self.parts.protocols)
            self.parts.protocols.append(Hashed.of(document))
        return index

    def environment(self, gpu_name: str, software: str) -> Hashed:
        key = (gpu_name, software)
        if key not in self._environments:
            try:
                env = environment_document(self.catalog, gpu_name, software)
                self._environments[key] = Hashed.of(env.document())
            except Rejected as rejected:
                self._environments[key] = rejected.bare()
        found = self._environments[key]
        if isinstance(found, Rejected):
            raise found.bare()
        return found

    def workload(self, key: DescriptorKey) -> ResolvedWorkload:
        # liger_version is part of the key: a variant rule may hold for a range of releases.
        wkey = _workload_key(key)
        found = self._workloads.get(wkey)
        if found is None:
            try:
                found = self._workloads[wkey] = self._new_workload(key)
            except Rejected as rejected:
                found = self._workloads[wkey] = rejected.bare()
        if isinstance(found, Rejected):
            raise found.bare()
        return found

    def _new_workload(self, key: DescriptorKey) -> ResolvedWorkload:
        x_value = parse_scalar(key.x_value)
        if isinstance(x_value, int) and abs(x_value) > _JSON_SAFE_INT:
            raise Rejected(
                "bad_value", f"x_value {key.x_value!r} is an integer beyond 2**53 (not I-JSON)"
            )
        try:
            workload, slug_, dtype, variant = _workload(self.catalog, key)
        except Rejected:
            raise
        except (ValueError, TypeError, RecursionError) as exc:
            # Valid JSON that is no workload: nesting too deep to parse, a value the Workload
            # model refuses (pydantic's ValidationError is a ValueError), text that is no str.
            raise Rejected(
                "bad_config", f"extra_benchmark_config_str is no workload: {_first_line(exc)}"
            ) from None
        resolved = ResolvedWorkload(
            hashed=Hashed.of(workload.document()),
            slug=slug_,
            dtype=dtype,
            kernel=workload.spec.kernel,
            variant=variant,
            key=key,
            index=len(self.parts.workloads),
            name_tail=name_tail(slug_),
        )
        self.parts.workloads.append(resolved)
        return resolved

    def implementation(self, provider: str, kernel: str, version: str) -> Hashed:
        return self.parts.implementations[self._implementation_part(provider, kernel, version)]

    def _implementation_part(self, provider: str, kernel: str, version: str) -> int:
        key = (provider, kernel, version)
        index = self._implementations.get(key)
        if index is None:
            impl = Implementation.model_validate(
                {"spec": {"provider": provider, "kernel": kernel, "ligerVersion": version}}
            )
            index = self._implementations[key] = len(self.parts.implementations)
            self.parts.implementations.append(Hashed.of(impl.document()))
        return index

    def _check_fields(self, key: DescriptorKey) -> None:
        """Hold back a key with a missing, unsafe or unknown field; the first problem wins.

        An empty x_name or x_value (checked between metric_name and gpu_name) is left to
        `_shared_of`: everything here is shared by keys that differ in x and config only.
        """
        for column, value in (
            ("kernel_name", key.kernel),
            ("kernel_provider", key.provider),
            ("metric_name", key.metric),
            ("gpu_name", key.gpu_name),
            ("liger_version", key.liger_version),
        ):
            if not value.strip():
                raise Rejected("missing_field", f"{column} is empty")
        # A kernel name the catalog splits (`dyt_beta=True`) is checked as the kernel it names.
        kernel = self._kernel_names.get(key.kernel)
        if kernel is None:
            kernel = self._kernel_names[key.kernel] = self.catalog.split_kernel(key.kernel)[0]
        for column, value in (
            ("kernel_name", kernel),
            ("kernel_provider", key.provider),
            ("kernel_operation_mode", key.mode),
        ):
            if value and not _IDENTIFIER.match(value):
                raise Rejected("bad_identifier", f"{column} {value!r} is not a plain identifier")
        units = self._units
        if key.metric not in units:
            raise Rejected(
                "unknown_metric", f"metric_name {key.metric!r} is not one of {sorted(units)}"
            )
        if key.unit != units[key.metric]:
            raise Rejected(
                "unknown_metric", f"{key.metric} in {key.unit!r}, expected {units[key.metric]!r}"
            )
        version = key.liger_version
        if version not in self._version_problems:
            self._version_problems[version] = _version_problem(version)
        problem = self._version_problems[version]
        if problem is not None:
            raise problem.bare()

    def _new_shared(self, key: DescriptorKey) -> SharedPart:
        """What keys that differ only in x and config share: checks, environment, names."""
        self._check_fields(key)
        environment = self.environment(key.gpu_name, key.software)
        kernel_name = self._kernel_names[key.kernel]  # set by _check_fields
        kernel = self.catalog.kernel(kernel_name)
        mode = key.mode or "unspecified"
        gpu_slug = self._gpu_slugs.get(key.gpu_name)
        if gpu_slug is None:
            gpu_slug = self._gpu_slugs[key.gpu_name] = slug(key.gpu_name)
        series = f"{kernel_name}/{mode}/{key.provider}/{gpu_slug}"
        predates = self._predates.get((kernel_name, key.liger_version))
        if predates is None:
            predates = self.catalog.predates_benchmark(kernel_name, key.liger_version)
            self._predates[(kernel_name, key.liger_version)] = predates
        kind = metric_kind(key.metric, self.catalog.protocols or None)
        title = f"{kernel.title if kernel else kernel_name} · {key.provider} · {mode}"
        title += kind.title
        name_parts = [kernel_name, mode, key.provider, gpu_slug]
        if kind.name_part:
            name_parts.insert(2, kind.name_part)
        shared = SharedPart(
            key=key,
            index=len(self.parts.shared),
            kernel_name=kernel_name,
            kernel=kernel,
            environment=environment,
            mode=mode,
            gpu_slug=gpu_slug,
            metric=kind.metric,
            suffix=kind.suffix,
            device=kind.device_method is not None,
            series=series,
            title=title,
            name_parts=tuple(name_parts),
            name_head=name_head(tuple(name_parts)),
            predates=(
                f"predates-benchmark-{self.catalog.first_releases[kernel_name]}"
                if predates
                else None
            ),
        )
        self.parts.shared.append(shared)
        return shared

    def _shared_of(self, key: DescriptorKey) -> SharedPart:
        # (kernel, mode, provider, metric, unit, gpu_name, liger_version, software): slices,
        # not eight attribute reads (this runs once per descriptor key).
        skey = key[:5] + key[9:]
        found = self._shared.get(skey)
        if found is None:
            try:
                found = self._shared[skey] = self._new_shared(key)
            except Rejected as rejected:
                # Empty kernel, provider or metric come before an empty x in the checks' order.
                early = rejected.reason == "missing_field" and rejected.detail in _EARLY_EMPTY
                found = self._shared[skey] = (early, rejected.bare())
        if isinstance(found, SharedPart):
            if key.x_name.strip() and key.x_value.strip():
                return found
        elif found[0]:
            raise found[1].bare()
        if not key.x_name.strip():
            raise Rejected("missing_field", "x_name is empty")
        if not key.x_value.strip():
            raise Rejected("missing_field", "x_value is empty")
        assert isinstance(found, tuple)
        raise found[1].bare()

    def resolve(self, key: DescriptorKey) -> Descriptor:
        """Build the descriptor for a key, or raise Rejected with the reason to hold it back."""
        shared = self._shared_of(key)
        resolved = self.workload(key)
        kernel_name, workload, workload_slug = resolved.kernel, resolved.hashed, resolved.slug
        p = self._protocol_part(key.metric, key.mode, kernel_name, key.liger_version)
        i = self._implementation_part(key.provider, kernel_name, key.liger_version)
        protocol, implementation = self.parts.protocols[p], self.parts.implementations[i]
        kernel = shared.kernel
        series = f"{shared.series}/{workload_slug}"
        labels = labels_of(shared, resolved.variant is not None)
        series += shared.suffix
        return Descriptor(
            key=key,
            metric=shared.metric,
            series_id=series,
            name_prefix=name_prefix(
                shared.name_parts, shared.name_head, resolved.slug, resolved.name_tail
            ),
            title=shared.title,
            labels=labels,
            benchmark=f"{kernel_name}/{shared.mode}",
            workload=workload.doc,
            implementation=implementation.doc,
            protocol=protocol.doc,
            environment=shared.environment.doc,
            workload_digest=workload.digest,
            implementation_digest=implementation.digest,
            protocol_digest=protocol.digest,
            environment_digest=shared.environment.digest,
            workload_canonical=workload.canonical,
            implementation_canonical=implementation.canonical,
            workload_slug=workload_slug,
            gpu_slug=shared.gpu_slug,
            dtype=resolved.dtype,
            known_kernel=kernel is not None,
            kernel=kernel_name,
            variant=resolved.variant,
            catalog_version=self.catalog.version,
            device=shared.device,
            parts=(shared.index, resolved.index, p, i),
        )


@dataclass(frozen=True)
class SharedPart:
    """What descriptor keys that differ only in x, x_label and config have in common."""

    key: DescriptorKey  # the first key resolved to it: its shared fields are every one's
    index: int  # in `Parts.shared`
    kernel_name: str
    kernel: KernelInfo | None
    environment: Hashed
    mode: str
    gpu_slug: str
    metric: str  # `speed` or `memory` (MetricKind.metric): key.metric is the CSV's name
    suffix: str  # MetricKind.suffix: the externalId's segment after the workload slug
    device: bool  # a device-time metric
    series: str  # externalId up to the workload slug
    title: str
    name_parts: tuple[str, ...]  # metadata.name's parts before the workload slug
    name_head: str  # `name_head(name_parts)`
    predates: str | None  # the VERSION_LABEL value, where the release predates the benchmark


@dataclass
class Parts:
    """Everything a resolver built, in the order it was built: what descriptors are made of.

    A descriptor's `parts` index these lists. Real history has ~37 descriptors per workload
    and ~6 per shared part (1M realistic rows: 55,613 descriptors, 1,507 workloads, 9,549
    shared parts): columns made and kept per part, taken per descriptor, cost a fraction of
    one Python tuple per descriptor, in time and memory (`columnar.DescriptorTable`). The
    lists only grow, so an index stays valid while another thread appends.
    """

    shared: list[SharedPart] = field(default_factory=list)
    workloads: list[ResolvedWorkload] = field(default_factory=list)
    protocols: list[Hashed] = field(default_factory=list)
    implementations: list[Hashed] = field(default_factory=list)


_EARLY_EMPTY = {
    f"{column} is empty" for column in ("kernel_name", "kernel_provider", "metric_name")
}


def _version_problem(version: str) -> Rejected | None:
    """Why a liger_version is refused: not PEP 440, or not PEP 440's own spelling of it."""
    try:
        Version(version)
        canonical_version(version)
    except InvalidVersion:
        return Rejected("bad_version", f"liger_version {version!r} is not PEP 440")
    except Rejected as rejected:
        return rejected.bare()
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def resolve(catalog: Catalog, key: DescriptorKey) -> Descriptor:
    return Resolver(catalog).resolve(key)


def run_name(descriptor: Descriptor, timestamp_slug: str) -> str:
    return f"{descriptor.name_prefix}-{timestamp_slug}"[:NAME_LIMIT].rstrip("-")
