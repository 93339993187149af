"""Run one upstream benchmark script as shipped, and also time every point by device time.

Started as `python device_launch.py benchmark_x.py --overwrite` in the scripts' folder, in the
scripts' interpreter: it needs torch and triton only (no kindex_etl; the GPU host's interpreter
may have nothing else), so it is run by its path, not imported as a package module.

Every call of `triton.testing.do_bench` (what upstream's timer is, whether a script calls it or
its `utils.run_speed_benchmark` does) first runs upstream's timer unchanged and returns its
figures to the script, so the CSV it writes is upstream's protocol. Then the same callable is
timed by device time, as the protocol in `KINDEX_DEVICE_PROTOCOL` (JSON, written by
`device_time.protocol_parameters`) says:

- `cuda_graph`: warm-up calls on a side stream, one CUDA graph captured over
  [grads set to None, the callable] and replayed in batches between CUDA events. This is the
  manual capture that worked for full passes on the H200 (`do_bench_cudagraph` cannot capture
  upstream's full-pass closure): the forward and backward of a full pass run on the capture
  stream, the output gradient drawn inside the graph.
- `cupti`: where capture fails (a backward closure whose graph was recorded on another stream, a
  host sync in the callable), the kernels' own times from torch.profiler (CUPTI), summed per
  call over a fixed number of calls.

One JSON line per call goes to `KINDEX_DEVICE_TIME_OUT`: the point (read from upstream's
`run_benchmarks` frame: kernel, provider, pass, x and config exactly as the CSV row has them),
upstream's figures, the device figures, the method and its counts. A do_bench call from outside
`run_benchmarks` (torch.compile's autotuner) is left to upstream's timer alone.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import runpy
import sys
import time
from typing import Any

QUANTILES = (0.5, 0.2, 0.8)


def _quantiles(values: list[float]) -> list[float]:
    """p50, p20, p80 with linear interpolation (numpy's and torch.quantile's default)."""
    data = sorted(values)
    out = []
    for q in QUANTILES:
        pos = q * (len(data) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        out.append(data[lo] + (data[hi] - data[lo]) * (pos - lo))
    return out


def _point() -> dict[str, Any] | None:
    """The benchmark point being timed, from the nearest `run_benchmarks` frame up the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        names = frame.f_locals
        if frame.f_code.co_name == "run_benchmarks" and "kernel_name" in names:
            config = names.get("extra_benchmark_config")
            return {
                "kernel_name": names.get("kernel_name"),
                "kernel_provider": names.get("kernel_provider"),
                "kernel_operation_mode": names.get("kernel_operation_mode") or "",
                "metric_name": names.get("metric_name"),
                "x_name": names.get("x_name"),
                "x_value": str(names.get("x")),
                # As upstream's utils writes it (json.dumps with dtypes as str).
                "extra_benchmark_config_str": json.dumps(config, default=str),
            }
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _clear(grads: Any) -> None:
    for t in grads or ():
        t.grad = None


def _graph_time(fn: Any, grads: Any, p: dict[str, Any]) -> dict[str, Any]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(p["warmupCalls"]):
            _clear(grads)
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    _clear(grads)
    with torch.cuda.graph(graph):
        _clear(grads)
        fn()
    try:
        # Estimate one replay, then size batches so each lasts about `batchTargetUs`.
        for _ in range(p["warmupReplays"]):
            graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(p["warmupReplays"]):
            graph.replay()
        end.record()
        end.synchronize()
        estimate_us = max(start.elapsed_time(end) * 1000 / p["warmupReplays"], 1e-3)
        per_batch = int(
            min(p["maxReplaysPerBatch"], max(1, round(p["batchTargetUs"] / estimate_us)))
        )
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(p["batches"])
        ]
        for s, e in events:
            s.record()
            for _ in range(per_batch):
                graph.replay()
            e.record()
        torch.cuda.synchronize()
        per_replay_ms = [s.elapsed_time(e) / per_batch for s, e in events]
    finally:
        del graph
        _clear(grads)
    p50, p20, p80 = _quantiles(per_replay_ms)
    return {
        "method": "cuda_graph",
        "p50_ms": p50, "p20_ms": p20, "p80_ms": p80,
        "batches": p["batches"], "replaysPerBatch": per_batch,
    }  # fmt: skip


def _device_events(prof: Any) -> list[tuple[float, float]]:
    """(start, duration) in us of every device activity (kernels, copies, sets) profiled."""
    from torch.autograd import DeviceType

    out = []
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            out.append((float(e.time_range.start), float(e.time_range.elapsed_us())))
    out.sort()
    return out


def _cupti_time(fn: Any, grads: Any, p: dict[str, Any]) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(p["warmupCalls"]):
        _clear(grads)
        fn()
    torch.cuda.synchronize()
    calls = p["profiledCalls"]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            _clear(grads)
            fn()
        torch.cuda.synchronize()
    _clear(grads)
    events = _device_events(prof)
    if not events:
        raise RuntimeError("the profiler saw no device activity")
    # Every call launches the same sequence after warm-up: split it per call where it divides.
    per_call = len(events) // calls if len(events) % calls == 0 else 0
    if per_call:
        sums = [
            sum(d for _, d in events[i * per_call : (i + 1) * per_call]) / 1000
            for i in range(calls)
        ]
        p50, p20, p80 = _quantiles(sums)
    else:
        p50 = p20 = p80 = sum(d for _, d in events) / 1000 / calls
    return {
        "method": "cupti",
        "p50_ms": p50, "p20_ms": p20, "p80_ms": p80,
        "calls": calls, "kernelsPerCall": per_call or len(events) / calls,
    }  # fmt: skip


def device_time(fn: Any, grads: Any, p: dict[str, Any], mode: str = "") -> dict[str, Any]:
    """The protocol's method for this pass; CUPTI where a CUDA graph cannot be captured."""
    import torch

    torch.cuda.synchronize()
    if p["methodByMode"].get(mode, p["methodByMode"]["*"]) == "cupti":
        return _cupti_time(fn, grads, p)
    captured_error = None
    try:
        return _graph_time(fn, grads, p)
    except Exception as exc:
        captured_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
    _recover_from_failed_capture()
    _clear(grads)
    try:
        result = _cupti_time(fn, grads, p)
    except Exception as exc:
        raise RuntimeError(f"{exc} (after a failed CUDA graph capture: {captured_error})") from exc
    result["captureError"] = captured_error
    return result


def _recover_from_failed_capture() -> None:
    """Leave the device and the RNG as a successful capture would.

    A capture that fails after drawing random numbers (a full pass's output gradient) leaves
    the CUDA generator's in-graph offset set, and its next draw outside any capture then fails
    ("Offset increment outside graph capture encountered unexpectedly", seen on the H200 with
    kl_div's full pass): a tiny capture that draws nothing starts and ends a capture cleanly,
    which resets it. A pending capture error on the device is cleared by synchronizing."""
    import torch

    # The pending error is the capture's, recorded already.
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
    scratch = torch.zeros(1, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scratch.add_(1)
    torch.cuda.synchronize()
    del graph


class Recorder:
    def __init__(self, out: str, protocol: dict[str, Any], script: str) -> None:
        self.out, self.protocol, self.script = out, protocol, script
        self.calls: dict[str, int] = {}

    def wrap(self, original: Any) -> Any:
        def do_bench(fn: Any, *args: Any, **kwargs: Any) -> Any:
            upstream = original(fn, *args, **kwargs)  # upstream's timer, as shipped, first
            point = _point()
            if point is None:
                # Not a benchmark point: another caller of do_bench in the script's process
                # (torch.compile's autotuner benchmarks its candidates with it; dyt's
                # torch_compile provider made 36 such calls a run on the H200). Nothing to time.
                return upstream
            grads = kwargs.get("grad_to_none")
            if grads is None and len(args) >= 3:
                grads = args[2]  # do_bench(fn, warmup, rep, grad_to_none, ...)
            began = time.monotonic()
            try:
                mode = point["kernel_operation_mode"]
                device: dict[str, Any] = device_time(fn, grads, self.protocol, mode)
            except Exception as exc:
                device = {"method": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
            device["seconds"] = round(time.monotonic() - began, 4)
            key = json.dumps(point, sort_keys=True)
            index = self.calls[key] = self.calls.get(key, -1) + 1
            figures = upstream if isinstance(upstream, list | tuple) else [upstream]
            record = {
                "script": self.script,
                "point": point,
                "call": index,
                "upstream": {
                    "p50_ms": figures[0],
                    "p20_ms": figures[1] if len(figures) > 1 else None,
                    "p80_ms": figures[2] if len(figures) > 2 else None,
                },
                "device": device,
            }  # fmt: skip
            with open(self.out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
            gc.collect()
            return upstream

        do_bench.__wrapped__ = original  # type: ignore[attr-defined]
        return do_bench


def install(out: str, protocol: dict[str, Any], script: str) -> None:
    import triton.testing

    triton.testing.do_bench = Recorder(out, protocol, script).wrap(triton.testing.do_bench)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: device_launch.py SCRIPT [ARGS...]")
    script = argv[0]
    protocol = json.loads(os.environ["KINDEX_DEVICE_PROTOCOL"])
    # As `python SCRIPT ARGS` would: its folder first on sys.path (not this file's, whose
    # neighbours are kindex_etl's modules), its argv, run as __main__.
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.argv = [script, *argv[1:]]
    install(os.environ["KINDEX_DEVICE_TIME_OUT"], protocol, os.path.basename(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
