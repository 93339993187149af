"""The upstream CSV's shape, as Liger-Kernel's `update_benchmark_data_csv` writes it.

Dependency-free on purpose: the GPU re-run imports it on machines that have only torch.
"""

from __future__ import annotations

COLUMNS = (
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
)
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"  # no zone: upstream's clock, treated as UTC
