"""Small upstream layouts and fakes for the trigger tests."""

from __future__ import annotations

import csv
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = [
    "kernel_name", "kernel_provider", "kernel_operation_mode", "metric_name", "metric_unit",
    "x_name", "x_label", "x_value", "y_value_50", "y_value_20", "y_value_80",
    "extra_benchmark_config_str", "gpu_name", "timestamp", "liger_version",
]  # fmt: skip


def rows_for(version: str, minute: int = 0) -> list[dict[str, str]]:
    """Two upstream rows (the seed's workload) measured with `version`."""
    out = []
    for provider in ("liger", "torch"):
        out.append(
            dict(zip(COLUMNS, [
                "megatron_rms_norm", provider, "full", "speed", "ms", "H", "hidden size", "2048",
                "0.10864", "0.10764", "0.1096", '{"S": 4096, "B": 1}', "NVIDIA H100 80GB HBM3",
                f"2026-06-10 21:{minute:02d}:42", version,
            ], strict=True))
        )  # fmt: skip
    return out


def add_release(upstream: Path, version: str, minute: int = 0) -> str:
    """A release folder `benchmarks/<sha>-v<version>/benchmark.csv`; returns its key."""
    key = f"benchmarks/{uuid.uuid4().hex[:7]}-v{version}/benchmark.csv"
    path = upstream / key
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows_for(version, minute))
    return key


@dataclass
class FakeFlowRun:
    id: uuid.UUID
    name: str


@dataclass
class FakePrefect:
    """Stands in for run_deployment / emit_event; counts calls (thread-safe)."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    fail_with: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run_deployment(self, name: str, **kwargs: Any) -> FakeFlowRun:
        with self.lock:
            self.calls.append((name, kwargs))
        if self.fail_with is not None:
            raise self.fail_with
        return FakeFlowRun(id=uuid.uuid4(), name="fake-run")

    def emit_event(self, **kwargs: Any) -> Any:
        with self.lock:
            self.events.append(kwargs)
        return None

    def kwargs(self) -> dict[str, Any]:
        return {
            "deployment": "kindex-gpu-rerun/gpu-rerun",
            "api_url": "http://127.0.0.1:1/api",
            "run_deployment": self.run_deployment,
            "emit_event": self.emit_event,
        }
