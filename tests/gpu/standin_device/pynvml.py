"""STAND-IN nvidia-ml-py (module pynvml) for the CPU tests: one GPU whose SM clock, power and
clock event reasons come from the environment (STANDIN_SM_CLOCK, STANDIN_THROTTLE)."""

import os

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0


def nvmlInit():
    pass


def nvmlDeviceGetHandleByIndex(index):
    return ("gpu", index)


def nvmlDeviceGetHandleByUUID(uuid):
    return ("gpu", 0)


def nvmlDeviceGetName(handle):
    return os.environ.get("STANDIN_GPU_NAME", "NVIDIA H200")


def nvmlSystemGetDriverVersion():
    return "580.0-standin"


def nvmlDeviceGetClockInfo(handle, kind):
    return int(os.environ.get("STANDIN_SM_CLOCK", "1980")) if kind == NVML_CLOCK_SM else 2619


def nvmlDeviceGetMaxClockInfo(handle, kind):
    return 1980 if kind == NVML_CLOCK_SM else 2619


def nvmlDeviceGetPowerUsage(handle):
    return 500000


def nvmlDeviceGetPowerManagementLimit(handle):
    return 700000


def nvmlDeviceGetTemperature(handle, kind):
    return 50


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return int(os.environ.get("STANDIN_THROTTLE", "0"), 0)
