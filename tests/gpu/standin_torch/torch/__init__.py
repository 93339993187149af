"""STAND-IN torch for the CPU tests: says a GPU is there so the harness's checks pass.

Only on the PYTHONPATH of the processes a test starts (the probe, the stand-in scripts); it
computes nothing. STANDIN_GPU_COUNT sets how many GPUs it reports (default 1).
"""

import os

__version__ = "2.11.0+standin"


class version:
    cuda = "13.0"
    hip = None


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return int(os.environ.get("STANDIN_GPU_COUNT", "1"))

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def get_device_name(index=0):
        return os.environ.get("STANDIN_GPU_NAME", "NVIDIA H200")

    @staticmethod
    def get_device_capability(index=0):
        return (9, 0)
