"""STAND-IN benchmark_rms_norm.py: upstream's shape, simulated kernels (computes nothing).

forward launches one kernel, backward two, full both; liger's kernels cost 5 us per 1024 of x,
torch's 50 us. The `hostile` provider copies to the host in its full pass, so a CUDA graph
cannot capture it (the launcher falls back to CUPTI). A backward closure, as upstream's,
backpropagates through a forward done outside it. Each call allocates the point's input
(two pages), whose placement scales its kernels (`torch.standin_placement`, STANDIN_PLACEMENT).
"""

import os
from importlib.metadata import version

import torch
import triton
from utils import run_benchmarks

COST_US = {"liger": 5.0, "torch": 50.0, "hostile": 20.0}


class Leaf:
    grad = None


def bench(x, provider, mode):
    cost = COST_US[provider] * x / 1024
    if provider == "liger" and version("liger-kernel") == os.environ.get("STANDIN_SLOW_VERSION"):
        cost *= 1.03
    cost *= torch.standin_placement(torch.empty(2 * torch.PAGE, dtype=torch.uint8, device="cuda"))
    leaf = Leaf()

    def forward():
        torch.standin_kernel(cost)

    def backward():
        torch.standin_kernel(cost)
        torch.standin_kernel(cost / 2)

    def full():
        if provider == "hostile":
            torch.standin_host_sync()
        forward()
        backward()

    fn = {"forward": forward, "backward": backward, "full": full}[mode]
    return triton.testing.do_bench(fn, grad_to_none=[leaf], quantiles=[0.5, 0.2, 0.8], rep=10)


if __name__ == "__main__":
    # As torch.compile's autotuner does: a do_bench call that is no benchmark point.
    triton.testing.do_bench(lambda: torch.standin_kernel(1.0))
    config = {"hidden_size": 4096, "dtype": "torch.bfloat16"}
    run_benchmarks(
        bench,
        "rms_norm",
        "speed",
        "ms",
        "T",
        "Sequence length",
        [1024, 8192],
        ["liger", "torch", "hostile"],
        ["forward", "backward", "full"],
        [config],
    )
