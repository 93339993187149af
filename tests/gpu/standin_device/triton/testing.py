"""STAND-IN triton.testing.do_bench: upstream's timer on a launch-bound host.

It runs the callable like upstream's (grads set to None before each call) and reports what a
host-bound timer reads: the larger of the call's simulated device time and STANDIN_HOST_US
(default 100 us) of host overhead, with p20/p80 at -/+10 %.
"""

import os

import torch


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    for _ in range(3):
        for t in grad_to_none or ():
            t.grad = None
        before = torch._state["clock"]
        fn()
        device_us = torch._state["clock"] - before
    ms = max(device_us, float(os.environ.get("STANDIN_HOST_US", "100"))) / 1000
    return [ms, ms * 0.9, ms * 1.1] if quantiles else ms
