"""Facts about the machine a re-run measures on: GPU, driver, CUDA, torch, triton, host CPU.

The facts are read by a small probe run with the same interpreter and PYTHONPATH as the
benchmark scripts (so they describe what measured, not the process that orchestrated), plus
`nvidia-smi` for the driver and `/proc/cpuinfo` for the host CPU. They become
`environment.json` beside the uploaded CSV:

    {"gpu_name": ..., "software": {"torch", "triton", "cuda", "driver", "hostCpu", "python"}, ...}

Only `software` enters the ExecutionEnvironment (and so its digest); the other keys (GPU count,
compute capability, CPU count, the liger-kernel actually imported) are for people reading it.
The liger-kernel version is deliberately not software: it is the implementation under test,
and runs of different versions on one host must share an environment.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

SOFTWARE_KEYS = ("torch", "triton", "cuda", "driver", "hostCpu", "python")

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


def nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [x.strip() for x in proc.stdout.splitlines() if x.strip()]
    return lines[0] if proc.returncode == 0 and lines else None


def host_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect_environment(python: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The whole environment.json for a run with `python` under `env`."""
    seen = probe_python(python, env)
    software = {
        "torch": seen.get("torch"),
        "triton": seen.get("triton"),
        "cuda": seen.get("cuda") or seen.get("hip"),
        "driver": nvidia_driver(),
        "hostCpu": host_cpu(),
        "python": seen.get("python"),
    }
    return {
        "gpu_name": seen.get("gpu_name"),
        "software": {k: v for k, v in software.items() if v},
        "gpuCount": seen.get("gpu_count"),
        "computeCapability": seen.get("capability"),
        "hostCpuCount": os.cpu_count(),
        "platform": platform.platform(),
        "ligerKernel": seen.get("liger_kernel"),
        "ligerKernelPath": seen.get("liger_kernel_path"),
        "probe": {k: v for k, v in seen.items() if k.endswith("error")},
        "cudaAvailable": bool(seen.get("cuda_available")),
    }
