"""The upstream CSV's shape, as Liger-Kernel's `update_benchmark_data_csv` writes it.

Dependency-free on purpose: the GPU re-run imports it on machines that have only torch.
"""

from __future__ import annotations

import re

UPSTREAM_COLUMNS = (
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
# What names one benchmark point of a script (a CSV row's, a launcher line's), GPU and release
# aside.
POINT_COLUMNS = (
    "kernel_name",
    "kernel_provider",
    "kernel_operation_mode",
    "metric_name",
    "x_name",
    "x_value",
    "extra_benchmark_config_str",
)
# The GPU's state while a device-time point was measured (NVML, recorded by
# `gpu/device_launch.py`): SM and memory clocks (MHz), power draw (W) and temperature (C) read
# while the timed batches ran, the clock event ("throttle") reasons set before, during or after
# them (NVML's bit mask, OR-ed), and whether any of them is a slowdown (`true`/`false`). The
# runs table has columns of the same names. Empty where the point recorded no state.
GPU_STATE_COLUMNS = (
    "gpu_sm_clock_mhz",
    "gpu_mem_clock_mhz",
    "gpu_power_w",
    "gpu_temperature_c",
    "gpu_throttle_reasons",
    "gpu_throttled",
)
# Our device-time CSVs (`gpu/device_time.py`, device_time.csv beside a re-run's benchmark.csv)
# add columns after upstream's: the upstream timer's y_value_50 of the same point in the same
# run, from which a run says whether that point is host-bound, then GPU_STATE_COLUMNS (CSVs
# written before issue 53 stop after the first). Each is read where a CSV has it.
DEVICE_TIME_COLUMNS = ("upstream_y_value_50", *GPU_STATE_COLUMNS)
# Where upstream publishes (an object store mirrors these keys): the cumulative file, overwritten
# in place, and one folder per benchmarked commit listed in order in COMMITS_LIST.
CUMULATIVE_FILE = "benchmark/data/all_benchmark_data.csv"
PER_COMMIT_PREFIX = "benchmarks/"
COMMITS_LIST = PER_COMMIT_PREFIX + "commits.txt"
# No zone: upstream's clock, treated as UTC.
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")
# What `float()` of a y value accepts in upstream files (upstream writes float('nan') as `nan`).
NUMBER = re.compile(r"^\s*[-+]?((\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|nan|NaN|inf|-inf|Infinity)\s*$")
# Upstream's memory unit "MB" is MiB (max_memory_allocated / 2**20); documents carry bytes.
MIB = 1 << 20
NS_PER_MS = 1_000_000
