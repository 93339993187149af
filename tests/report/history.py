"""Upstream rows shaped like the real history the report is read on (issue 33).

Kernels, sweeps and configs as upstream's scripts write them (taken from the upstream sample's
H100 rows); one GPU with a long history (H100, ten releases), others with two or three (A100,
B200, and H200, whose name has no form factor); liger with its baselines. Three events, as in
the real history: an environment step (every provider of most kernels about 30 % slower from
0.8.0 on the H100, like the torch/triton drift of 2025), one liger-only regression
(`layer_norm` backward, 0.6.1) and a memory step (`kto_loss`, 0.7.0). Deterministic (seeded).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tests.analysis.helpers import build_warehouse
from tests.helpers import row

H100 = "NVIDIA H100 80GB HBM3"
H100_RELEASES = ("0.5.4", "0.5.10", "0.6.0", "0.6.1", "0.6.3", "0.7.0", "0.8.0", "0.8.1")
OTHER_GPUS = {
    "NVIDIA A100-SXM4-80GB": ("0.6.1", "0.7.0", "0.8.0"),
    "NVIDIA B200": ("0.7.0", "0.8.0"),
    "NVIDIA H200": ("0.8.0", "0.8.1"),
}
# kernel: (x name, x label, x values, config, baseline, base ms at the first x, liger's speed-up)
KERNELS = {
    "layer_norm": ("N", "hidden size", (1024, 4096, 16384),
                   '{"M": 4096, "dtype": "torch.float32", "eps": 1e-06}', "huggingface", 0.05, 1.8),
    "megatron_rms_norm": ("H", "hidden size", (1024, 4096, 16384), '{"S": 4096, "B": 1}',
                          "torch", 0.08, 2.5),
    "kto_loss": ("B", "Batch Size (B)", (2, 8, 32),
                 '{"T": 512, "H": 1024, "V": 128256, "mode": "forward", "dtype": '
                 '"torch.bfloat16", "bias": true, "beta": 0.1, "ignore_index": 42}',
                 "huggingface", 2.0, 1.3),
    "fused_neighborhood_attention": (
        "seq_len", "sequence length", (128, 512, 2048),
        '{"batch_size": 2, "hidden_size": 512, "num_heads": 8, "kernel_size": 7, '
        '"dilation": 1, "bias": true, "dtype": "torch.float32"}', "torch", 0.3, 3.0),
    "tvd": ("V", "vocab size", (4096, 32768, 131072), '{"B": 8, "T": 2048}', "torch", 0.4, 1.1),
}  # fmt: skip
MODES = ("forward", "backward", "full")
ENVIRONMENT_STEP = ("0.8.0", 1.3)  # on the H100, every provider of these kernels:
ENVIRONMENT_KERNELS = ("layer_norm", "megatron_rms_norm", "fused_neighborhood_attention", "tvd")
REGRESSION = ("layer_norm", "backward", "0.6.1", 1.4)  # liger only
MEMORY_STEP = ("kto_loss", "0.7.0", 1.25)


def _rows(gpu: str, releases: tuple[str, ...], rng: np.random.Generator) -> Iterator[dict]:
    gpu_speed = {"NVIDIA B200": 0.6, "NVIDIA H200": 0.8, "NVIDIA A100-SXM4-80GB": 1.7}.get(gpu, 1)
    for day, version in enumerate(releases):
        stamp = f"2025-{1 + day:02d}-{10 + day:02d} 0{day % 10}:1{day % 10}:00"
        for kernel, (x_name, x_label, xs, config, base, ms, speedup) in KERNELS.items():
            for provider in ("liger", base):
                for mode in MODES:
                    factor = {"forward": 1.0, "backward": 2.0, "full": 3.0}[mode] * gpu_speed
                    if provider == "liger":
                        factor /= speedup
                    if (
                        gpu == H100
                        and kernel in ENVIRONMENT_KERNELS
                        and _at_or_after(version, ENVIRONMENT_STEP[0])
                    ):
                        factor *= ENVIRONMENT_STEP[1]
                    k, m, rel, step = REGRESSION
                    if (provider, kernel, mode) == ("liger", k, m) and _at_or_after(version, rel):
                        factor *= step
                    for i, x in enumerate(xs):
                        median = ms * factor * (2**i) * float(np.exp(rng.normal(0, 0.01)))
                        yield _row(kernel, provider, mode, "speed", x_name, x_label, x, median,
                                   0.01, config, gpu, stamp, version)  # fmt: skip
                        if mode != "full":
                            continue
                        mib = 64.0 * (2**i) * (0.5 if provider == "liger" else 1.0)
                        mk, mrel, mstep = MEMORY_STEP
                        if kernel == mk and provider == "liger" and _at_or_after(version, mrel):
                            mib *= mstep
                        yield _row(kernel, provider, mode, "memory", x_name, x_label, x, mib,
                                   0.0, config, gpu, stamp, version)  # fmt: skip


def _at_or_after(version: str, release: str) -> bool:
    from packaging.version import Version

    return Version(version) >= Version(release)


def _row(kernel: str, provider: str, mode: str, metric: str, x_name: str, x_label: str,
         x: int, value: float, spread: float, config: str, gpu: str, stamp: str,
         version: str) -> dict[str, str]:  # fmt: skip
    return row(
        kernel_name=kernel,
        kernel_provider=provider,
        kernel_operation_mode=mode,
        metric_name=metric,
        metric_unit="ms" if metric == "speed" else "MB",
        x_name=x_name,
        x_label=x_label,
        x_value=str(x),
        y_value_50=repr(value),
        y_value_20=repr(value * (1 - spread)),
        y_value_80=repr(value * (1 + spread)),
        extra_benchmark_config_str=config,
        gpu_name=gpu,
        timestamp=stamp,
        liger_version=version,
    )


def history_rows() -> list[list[dict[str, str]]]:
    """One group of rows (one upstream CSV) per GPU."""
    rng = np.random.default_rng(33)
    groups = [list(_rows(H100, H100_RELEASES, rng))]
    groups += [list(_rows(gpu, rel, rng)) for gpu, rel in OTHER_GPUS.items()]
    return groups


def history_warehouse(tmp: Path) -> str:
    return build_warehouse(tmp, history_rows(), name="history")
