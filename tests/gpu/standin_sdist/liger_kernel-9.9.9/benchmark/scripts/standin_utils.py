"""STAND-IN harness helpers: upsert rows into ../data/all_benchmark_data.csv like upstream."""

import csv
import os
import sys
import time
from importlib.metadata import version

COLUMNS = [
    "kernel_name",
    "kernel_provider",
    "kernel_operation_mode",
    "metric_name",
    "metric_unit",
    "x_name",
    "x_label",
    "x_value",
    "y_value_50",
    "y_value_20",
    "y_value_80",
    "extra_benchmark_config_str",
    "gpu_name",
    "timestamp",
    "liger_version",
]
GPU = os.environ.get("STANDIN_GPU_NAME", "NVIDIA H200")


def key(row):
    # As upstream's update_benchmark_data_csv: the version is not part of the key.
    return (*(str(row[c]) for c in COLUMNS[:8]), row["extra_benchmark_config_str"], row["gpu_name"])


def upsert(rows):
    path = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "../data/all_benchmark_data.csv"
    )
    existing = []
    if os.path.isfile(path):
        with open(path) as fh:
            existing = list(csv.DictReader(fh))
    table = {key(r): r for r in existing}
    for r in rows:
        table[key(r)] = r
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(table.values())


def row(kernel, provider, mode, metric, unit, x_name, x_label, x, y, config):
    return {
        "kernel_name": kernel,
        "kernel_provider": provider,
        "kernel_operation_mode": mode,
        "metric_name": metric,
        "metric_unit": unit,
        "x_name": x_name,
        "x_label": x_label,
        "x_value": x,
        "y_value_50": y,
        "y_value_20": y * 0.99,
        "y_value_80": y * 1.01,
        "extra_benchmark_config_str": config,
        "gpu_name": GPU,
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%S"),
        "liger_version": version("liger-kernel"),
    }


def fail_if_asked(name):
    if os.environ.get("STANDIN_FAIL") == name:
        print(f"stand-in {name}: failing on purpose", file=sys.stderr)
        sys.exit(3)
    if os.environ.get("STANDIN_HANG") == name:
        time.sleep(600)


def generic(kernel):
    """A stand-in script of `kernel`: 4 speed rows over x in (1024, 2048), after STANDIN_SLEEP s.

    It appends what it saw (CUDA_VISIBLE_DEVICES, start and end) to STANDIN_TRACE, if set, so
    tests can check which GPU it ran on and when.
    """
    fail_if_asked(kernel)
    start = time.time()
    time.sleep(float(os.environ.get("STANDIN_SLEEP", "0")))
    config = '{"hidden_size": 4096, "dtype": "torch.bfloat16"}'
    rows = [
        row(kernel, provider, mode, "speed", "ms", "T", "Sequence length", t, t / 1e5, config)
        for mode in ("forward", "full")
        for provider in ("liger",)
        for t in (1024, 2048)
    ]
    upsert(rows)
    trace = os.environ.get("STANDIN_TRACE")
    if trace:
        with open(trace, "a") as fh:
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            fh.write(f"{kernel},{version('liger-kernel')},{gpu},{start},{time.time()}\n")
    print(f"stand-in {kernel}: {len(rows)} rows on GPU {os.environ.get('CUDA_VISIBLE_DEVICES')}")
