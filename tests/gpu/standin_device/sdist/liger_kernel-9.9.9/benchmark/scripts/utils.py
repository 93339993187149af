"""STAND-IN of upstream's benchmark utils: run_benchmarks with upstream's loop and local names
(the device-time launcher reads the point from them), rows upserted in the upstream schema."""

import csv
import json
import os
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
LIGER_KERNEL_VERSION = version("liger-kernel")


def run_benchmarks(
    bench_test_fn,
    kernel_name,
    metric_name,
    metric_unit,
    x_name,
    x_label,
    x_values,
    kernel_providers,
    kernel_operation_modes,
    extra_benchmark_configs,
):
    rows = []
    for extra_benchmark_config in extra_benchmark_configs:
        for kernel_operation_mode in kernel_operation_modes:
            for kernel_provider in kernel_providers:
                for x in x_values:
                    y_50, y_20, y_80 = bench_test_fn(x, kernel_provider, kernel_operation_mode)
                    rows.append(
                        {
                            "kernel_name": kernel_name,
                            "kernel_provider": kernel_provider,
                            "kernel_operation_mode": kernel_operation_mode,
                            "metric_name": metric_name,
                            "metric_unit": metric_unit,
                            "x_name": x_name,
                            "x_label": x_label,
                            "x_value": x,
                            "y_value_50": y_50,
                            "y_value_20": y_20,
                            "y_value_80": y_80,
                            "extra_benchmark_config_str": json.dumps(extra_benchmark_config),
                            "gpu_name": os.environ.get("STANDIN_GPU_NAME", "NVIDIA H200"),
                            "timestamp": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "liger_version": LIGER_KERNEL_VERSION,
                        }
                    )
    path = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "../data/all_benchmark_data.csv"
    )
    with open(path, newline="") as fh:
        existing = list(csv.DictReader(fh))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(existing + rows)
