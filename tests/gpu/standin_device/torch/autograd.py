"""STAND-IN torch.autograd: the DeviceType the launcher filters profiler events by."""

import enum


class DeviceType(enum.Enum):
    CPU = 0
    CUDA = 1
