"""Facts about the machine a re-run measures on, and which of them enter the environment digest.

The facts come from three places: a small probe run with the same interpreter and PYTHONPATH as
the benchmark scripts (so they describe what measured, not the process that orchestrated), one
`nvidia-smi --query-gpu` per host (the state of each GPU: UUID, clocks, power limit, ECC,
persistence, MIG), and `/proc/cpuinfo` / `os.cpu_count()` for the host CPU. They become
`environment.json` beside each uploaded CSV:

    {"gpu_name": ..., "software": {...digest keys...}, "gpus": [{...per GPU...}], ...}

Only `software` enters the ExecutionEnvironment, and so its digest. It holds what changes the
measurement (`DIGEST_KEYS`):

- torch, triton, cuda, driver, python: the code that compiles and launches every kernel;
- hostCpu (the CPU model): launch-bound points are timed by the host, not the GPU;
- gpuPowerLimitW, gpuMaxClocksMHz: the ceiling the GPU may boost to (a capped card is slower);
- eccMode: ECC costs memory bandwidth; migMode: a MIG slice is a smaller device.

Left out of the digest, recorded for reading noise (`gpus`, `hostCpuCount`): the GPU UUID (two
identical cards are one environment; the UUID says which card a run used), current SM and
memory clocks and temperature (they move during a run: a reading, not a configuration),
persistence mode (it changes start-up, not timed kernels after warm-up), and the core count
(the scripts run one process each). The liger-kernel version is deliberately not software: it
is the implementation under test, and runs of different versions on one host must share an
environment.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

DIGEST_KEYS = (
    "torch",
    "triton",
    "cuda",
    "driver",
    "python",
    "hostCpu",
    "gpuPowerLimitW",
    "gpuMaxClocksMHz",
    "eccMode",
    "migMode",
)

# nvidia-smi --query-gpu fields, in the order asked, and the key each becomes in `gpus`.
SMI_FIELDS = (
    ("index", "index"),
    ("uuid", "uuid"),
    ("name", "name"),
    ("pci.bus_id", "pciBusId"),
    ("driver_version", "driver"),
    ("clocks.sm", "smClockMHz"),
    ("clocks.mem", "memClockMHz"),
    ("clocks.max.sm", "maxSmClockMHz"),
    ("clocks.max.mem", "maxMemClockMHz"),
    ("power.limit", "powerLimitW"),
    ("ecc.mode.current", "eccMode"),
    ("persistence_mode", "persistenceMode"),
    ("mig.mode.current", "migMode"),
    ("temperature.gpu", "temperatureC"),
)

PROBE = r"""
import json, platform, sys
out = {"python": platform.python_version(), "executable": sys.executable}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    out["cuda_available"] = bool(torch.cuda.is_available())
    if out["cuda_available"]:
        out["gpu_count"] = torch.cuda.device_count()
        out["gpu_name"] = torch.cuda.get_device_name(torch.cuda.current_device())
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
except Exception as exc:  # torch missing or broken
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    import triton
    out["triton"] = triton.__version__
except Exception:
    pass
try:
    import importlib.metadata as md
    import liger_kernel
    out["liger_kernel"] = md.version("liger-kernel")
    out["liger_kernel_path"] = liger_kernel.__file__
except Exception as exc:
    out["liger_kernel_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def probe_python(python: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the probe in `python` (with `env`); returns what it saw."""
    proc = subprocess.run(
        [python, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    if proc.returncode != 0:
        return {"probe_error": proc.stderr.strip()[-2000:]}
    try:
        value = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"probe_error": proc.stdout.strip()[-2000:]}
    return value if isinstance(value, dict) else {"probe_error": "probe printed no object"}


def _smi_value(raw: str) -> str | None:
    value = raw.strip()
    return None if value in ("", "[N/A]", "N/A", "[Not Supported]") else value


def parse_gpu_query(text: str) -> list[dict[str, str | None]]:
    """The rows of `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(SMI_FIELDS):
            continue
        out.append({key: _smi_value(v) for (_, key), v in zip(SMI_FIELDS, values, strict=True)})
    return out


def query_gpus() -> list[dict[str, str | None]]:
    """One entry per GPU nvidia-smi sees (all of the host's, not only CUDA_VISIBLE_DEVICES)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    fields = ",".join(name for name, _ in SMI_FIELDS)
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_gpu_query(proc.stdout) if proc.returncode == 0 else []


def host_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _clocks(gpu: dict[str, str | None]) -> str | None:
    sm, mem = gpu.get("maxSmClockMHz"), gpu.get("maxMemClockMHz")
    return f"{sm}/{mem}" if sm and mem else None


def software_facts(seen: dict[str, Any], gpu: dict[str, str | None] | None) -> dict[str, str]:
    """The digest's facts (DIGEST_KEYS) from a probe and the GPU that measured; None left out."""
    g = gpu or {}
    values: dict[str, Any] = {
        "torch": seen.get("torch"),
        "triton": seen.get("triton"),
        "cuda": seen.get("cuda") or seen.get("hip"),
        "driver": g.get("driver"),
        "python": seen.get("python"),
        "hostCpu": host_cpu(),
        "gpuPowerLimitW": g.get("powerLimitW"),
        "gpuMaxClocksMHz": _clocks(g),
        "eccMode": g.get("eccMode"),
        "migMode": g.get("migMode"),
    }
    return {k: str(values[k]) for k in DIGEST_KEYS if values.get(k)}


def collect_environment(
    python: str,
    env: dict[str, str] | None = None,
    *,
    gpus: list[dict[str, str | None]] | None = None,
) -> dict[str, Any]:
    """The whole environment.json for a run with `python` under `env` (see the module doc).

    `gpus` is the host's nvidia-smi view (queried when not given); the first one's
    configuration enters the digest: a host's GPUs are one model, configured alike.
    """
    seen = probe_python(python, env)
    host_gpus = query_gpus() if gpus is None else gpus
    return {
        "gpu_name": seen.get("gpu_name"),
        "software": software_facts(seen, host_gpus[0] if host_gpus else None),
        "gpus": host_gpus,
        "gpuCount": seen.get("gpu_count"),
        "computeCapability": seen.get("capability"),
        "hostCpuCount": os.cpu_count(),
        "platform": platform.platform(),
        "ligerKernel": seen.get("liger_kernel"),
        "ligerKernelPath": seen.get("liger_kernel_path"),
        "probe": {k: v for k, v in seen.items() if k.endswith("error")},
        "cudaAvailable": bool(seen.get("cuda_available")),
    }
