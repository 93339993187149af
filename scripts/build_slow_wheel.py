"""Build the deliberately slower liger-kernel of the device-time A/B proof (not a release).

    python scripts/build_slow_wheel.py liger_kernel-0.8.5-py3-none-any.whl OUT_DIR
    python scripts/build_slow_wheel.py liger_kernel-0.8.5-py3-none-any.whl OUT_DIR swiglu

The second (issue 53) slows a matmul-heavy kernel instead: LigerSwiGLUMLP's forward (three
matmuls and liger's fused SiLU-multiply) gets a spin kernel of SWIGLU_CYCLES SM cycles per
element of its input per column of its intermediate size, i.e. in proportion to the MLP's
flops (about 2 % of the forward on the lent H100, measured: docs/paired-device-time.md), as
`0.8.5+kindex.slowswiglu`.

Writes OUT_DIR/liger_kernel-0.8.5+kindex.slow-py3-none-any.whl: 0.8.5's wheel with a spin
kernel (`torch.cuda._sleep`, 6e-5 SM cycles per element of the input) launched after
LigerRMSNorm's forward, on the same stream, and its version set to `0.8.5+kindex.slow` so the
campaign runner can interleave it with 0.8.5 (docs/reruns.md, "Device time").
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import zipfile
from pathlib import Path

LOCAL = "kindex.slow"
# Exactly what ran on the H200 (the fixture's 0.8.5+kindex.slow runs).
PATCH = """

# kindex-etl issue 34: NOT a liger-kernel release. A deliberate slowdown for the device-time
# A/B proof: after LigerRMSNorm's forward, a spin kernel of ~6e-5 SM cycles per element
# (about 3 % of the forward's device time on an H200), launched on the same stream.
import torch as _kindex_torch  # noqa: E402

_kindex_forward = LigerRMSNorm.forward


def _kindex_slow_forward(self, hidden_states):
    out = _kindex_forward(self, hidden_states)
    _kindex_torch.cuda._sleep(max(1, int(hidden_states.numel() * 6e-5)))
    return out


LigerRMSNorm.forward = _kindex_slow_forward
"""


SWIGLU_LOCAL = "kindex.slowswiglu"
SWIGLU_CYCLES = float(os.environ.get("KINDEX_SLOW_SWIGLU_CYCLES", "4e-7"))
SWIGLU_PATCH = """

# kindex-etl issue 53: NOT a liger-kernel release. A deliberate slowdown for the paired
# device-time A/B proof: after LigerSwiGLUMLP's forward (three matmuls and the fused SiLU-mul),
# a spin kernel of {cycles} SM cycles per input element per intermediate column (in proportion
# to the MLP's flops), launched on the same stream.
import torch as _kindex_torch  # noqa: E402

_kindex_forward = LigerSwiGLUMLP.forward


def _kindex_slow_forward(self, x):
    out = _kindex_forward(self, x)
    _kindex_torch.cuda._sleep(max(1, int(x.numel() * self.intermediate_size * {cycles})))
    return out


LigerSwiGLUMLP.forward = _kindex_slow_forward
"""
# What each kernel's slow build patches: (local version, file in the wheel, patch).
KERNELS = {
    "rms_norm": (LOCAL, "liger_kernel/transformers/rms_norm.py", PATCH),
    "swiglu": (SWIGLU_LOCAL, "liger_kernel/transformers/swiglu.py",
               SWIGLU_PATCH.format(cycles=repr(SWIGLU_CYCLES))),
}  # fmt: skip


def _record_line(name: str, data: bytes) -> str:
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={h},{len(data)}"


def build(wheel: Path, out_dir: Path, kernel: str = "rms_norm") -> Path:
    local, target, patch = KERNELS[kernel]
    version = wheel.name.split("-")[1]
    slow = f"{version}+{local}"
    old_info, new_info = f"liger_kernel-{version}.dist-info/", f"liger_kernel-{slow}.dist-info/"
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            data = z.read(name)
            if name == target:
                data += patch.encode()
            if name == old_info + "METADATA":
                data = data.replace(f"Version: {version}\n".encode(), f"Version: {slow}\n".encode())
            if name != old_info + "RECORD":
                files[name.replace(old_info, new_info)] = data
    record = "\n".join([*(_record_line(n, d) for n, d in sorted(files.items())),
                        f"{new_info}RECORD,,"]) + "\n"  # fmt: skip
    files[new_info + "RECORD"] = record.encode()
    out = out_dir / f"liger_kernel-{slow}-py3-none-any.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:4]))
