"""The kernelindex.dev/v1alpha1 document kinds and the descriptors that runs point at.

These models are the contract in code: the JSON Schema of each kind is exported from them
(`kindex-etl schema`), and tests validate every JSON line the fast columnar writer emits
against them.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION: Final = "kernelindex.dev/v1alpha1"
ApiVersion = Literal["kernelindex.dev/v1alpha1"]
Scalar = int | float | str | bool | None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def document(self) -> dict[str, Any]:
        """The JSON-ready dict; optional fields that are unset are left out, not null."""
        return self.model_dump(mode="json", exclude_none=True)


class _Document(_Model):
    """A versioned kind: `apiVersion` and `kind` (and `spec`) are what its digest hashes."""

    apiVersion: ApiVersion = API_VERSION


class Metadata(_Model):
    name: str
    title: str
    labels: dict[str, str] | None = None


# ExecutionEnvironment -------------------------------------------------------------------------


class Hardware(_Model):
    vendor: str
    product: str
    formFactor: str | None = None
    architecture: str


class EnvironmentSpec(_Model):
    hardware: Hardware
    software: dict[str, str] = Field(default_factory=dict)


class ExecutionEnvironment(_Document):
    kind: Literal["ExecutionEnvironment"] = "ExecutionEnvironment"
    metadata: Metadata
    spec: EnvironmentSpec


# BenchmarkProtocol ----------------------------------------------------------------------------


class Harness(_Model):
    name: str
    repository: str


class ProtocolMeasurement(_Model):
    timer: str | None = None
    memory: str | None = None
    primaryStatistic: str


class Comparability(_Model):
    notes: str
    family: str


class ProtocolSpec(_Model):
    harness: Harness
    measurement: ProtocolMeasurement
    comparability: Comparability


class BenchmarkProtocol(_Document):
    kind: Literal["BenchmarkProtocol"] = "BenchmarkProtocol"
    metadata: Metadata
    spec: ProtocolSpec


# Descriptors (hashed into workloadDigest / implementationDigest) -------------------------------


class WorkloadSpec(_Model):
    kernel: str
    parameters: dict[str, Scalar]
    dtype: str | None


class Workload(_Document):
    """What was computed: kernel, its shape parameters by meaning-name (the swept x too), dtype."""

    kind: Literal["Workload"] = "Workload"
    spec: WorkloadSpec

    def document(self) -> dict[str, Any]:
        # dtype None is meaningful here (unknown), so it is kept as null for hashing.
        return self.model_dump(mode="json")


class ImplementationSpec(_Model):
    provider: str
    kernel: str
    ligerVersion: str


class Implementation(_Document):
    """Who computed it: the provider's code path in one liger-kernel release."""

    kind: Literal["Implementation"] = "Implementation"
    spec: ImplementationSpec


# BenchmarkRun ---------------------------------------------------------------------------------


class Median(_Model):
    median: int


class Timing(_Model):
    latencyNs: Median
    primaryStatistic: Literal["median"] = "median"


class MemoryStats(_Model):
    peakBytes: Median
    primaryStatistic: Literal["median"] = "median"


class RunMeasurement(_Model):
    unit: Literal["ns", "bytes"]
    value: int
    metric: Literal["latency", "peak_memory"]
    statistic: Literal["p20", "p80"]


class GpuStateNative(_Model):
    """The GPU's state while a device-time point was measured (NVML; the runs table's gpu_*
    columns): clocks, power and temperature read while it ran, the throttle reasons set
    around it (one bit mask) and whether one of them is a slowdown."""

    memClockMHz: int | None = None
    powerW: float | None = None
    smClockMHz: int | None = None
    temperatureC: int | None = None
    throttleReasons: int | None = None
    throttled: bool | None = None


class DeviceTimeNative(_Model):
    """A device-time run's point as its re-run recorded it beside upstream's timer."""

    gpu: GpuStateNative | None = None  # where the re-run recorded the GPU's state
    hostBound: bool  # upstream's figure at least the protocol's hostBoundFactor x device time
    upstreamOverDevice: float | None = None
    upstreamP50Ms: float | None = None  # upstream's timer, same point, same run


class SourceNative(_Model):
    source: Literal["liger-kernel-bench"] = "liger-kernel-bench"
    metrics: dict[str, float | None]
    benchmark: str
    externalId: str
    deviceTime: DeviceTimeNative | None = None  # device-time runs only


class RunSpec(_Model):
    status: Literal["passed", "failed"]
    timing: Timing | None = None
    memory: MemoryStats | None = None
    observedAt: str
    measurements: list[RunMeasurement]
    sourceNative: SourceNative
    protocolDigest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    workloadDigest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    environmentDigest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    implementationDigest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]


class BenchmarkRun(_Document):
    kind: Literal["BenchmarkRun"] = "BenchmarkRun"
    metadata: Metadata
    spec: RunSpec

    def document(self) -> dict[str, Any]:
        doc = super().document()
        # NaN points keep their slot in sourceNative.metrics as null (exclude_none would drop
        # dict values too, so put them back).
        doc["spec"]["sourceNative"]["metrics"] = dict(self.spec.sourceNative.metrics)
        return doc


DOCUMENT_KINDS: dict[str, type[_Document]] = {
    "BenchmarkRun": BenchmarkRun,
    "BenchmarkProtocol": BenchmarkProtocol,
    "ExecutionEnvironment": ExecutionEnvironment,
    "Workload": Workload,
    "Implementation": Implementation,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    return {kind: model.model_json_schema() for kind, model in DOCUMENT_KINDS.items()}
