"""STAND-IN torch.profiler: every simulated kernel launched inside `profile` is an event."""

import enum

import torch
from torch.autograd import DeviceType


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


class _Range:
    def __init__(self, start, us):
        self.start, self._us = start, us

    def elapsed_us(self):
        return self._us


class _Event:
    device_type = DeviceType.CUDA

    def __init__(self, start, us):
        self.time_range = _Range(start, us)


class profile:
    def __init__(self, activities=None):
        self._events = []

    def __enter__(self):
        torch._state["profile"] = self._events
        return self

    def __exit__(self, *exc):
        torch._state["profile"] = None
        return False

    def events(self):
        return [_Event(start, us) for start, us in self._events]
