"""STAND-IN torch with a simulated device, for the device-time protocol's CPU tests.

Only on the PYTHONPATH of the processes a test starts. Nothing is computed: a "kernel" is
`standin_kernel(us)`, which advances a simulated device clock by `us` microseconds (or, during
a CUDA graph capture, is recorded into the graph, which each replay launches again). CUDA
events read that clock and the profiler lists each kernel with its duration, so the launcher's
real code paths (capture, replay, batches, CUPTI sums, the fallback) run on CPU with figures a
test can predict. `standin_host_sync()` is what a callable that copies to the host does: it
fails during a capture, as on a GPU. It reports GPUs like tests/gpu/standin_torch.

Placement (STANDIN_PLACEMENT, a fraction): `empty` hands out addresses in 2 MiB pages, one
after the other, from where the process starts (side B of a paired sitting one page after side
A); `standin_placement(t)` is 1 + that fraction for a tensor on an odd page, else 1: a steady
per-process difference, as a small memory-bound kernel's buffers gave on the H100.
"""

import contextlib
import json
import os

__version__ = "2.11.0+standin"

_state = {"clock": 0.0, "capture": None, "profile": None}
PAGE = 2 << 20
uint8 = "uint8"
bfloat16 = "bfloat16"


def _first_address():
    side = json.loads(os.environ.get("KINDEX_DEVICE_PAIR") or "{}").get("side")
    return PAGE if side == "B" else 0


_state["next_address"] = _first_address()


class version:
    cuda = "13.0"
    hip = None


def standin_kernel(us):
    if _state["capture"] is not None:
        _state["capture"].append(us)
        return
    start = _state["clock"]
    _state["clock"] += us
    if _state["profile"] is not None:
        _state["profile"].append((start, us))


def standin_host_sync():
    if _state["capture"] is not None:
        raise RuntimeError(
            "Cannot copy between CPU and CUDA tensors during CUDA graph capture (stand-in)"
        )


class _Tensor:
    def __init__(self, nbytes=0):
        self.address = _state["next_address"]
        _state["next_address"] += -(-nbytes // PAGE) * PAGE

    def add_(self, other):
        standin_kernel(0.5)
        return self


def zeros(*shape, device=None):
    return _Tensor()


def empty(nbytes, dtype=None, device=None):
    return _Tensor(int(nbytes))


def standin_placement(tensor):
    slow = float(os.environ.get("STANDIN_PLACEMENT", "0"))
    return 1.0 + slow if (tensor.address // PAGE) % 2 else 1.0


class _Stream:
    def wait_stream(self, other):
        pass


class _Event:
    def __init__(self, enable_timing=False):
        self.at = None

    def record(self):
        self.at = _state["clock"]

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.at - self.at) / 1000.0


class _Graph:
    def __init__(self):
        self.kernels = []

    def replay(self):
        for us in self.kernels:
            standin_kernel(us)


@contextlib.contextmanager
def _capture(graph):
    _state["capture"] = graph.kernels
    try:
        yield
    finally:
        _state["capture"] = None


class cuda:
    Stream = _Stream
    Event = _Event
    CUDAGraph = _Graph
    graph = staticmethod(_capture)

    @staticmethod
    def stream(s):
        return contextlib.nullcontext()

    @staticmethod
    def current_stream():
        return _Stream()

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def empty_cache():
        pass

    @staticmethod
    def _sleep(cycles):
        _state["slept"] = _state.get("slept", 0) + cycles
        standin_kernel(cycles / 1980.0)  # a spin kernel at 1,980 MHz

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
