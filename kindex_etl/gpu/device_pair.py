"""The paired device-time protocol: two builds measured point by point in one sitting.

Issue 53: on a GPU that runs at its power cap (the lent H100: SM clock 1,485-1,980 MHz under
load, SW power cap set in 57 of 259 busy samples), two whole script runs ~80 s apart differ by
2-9 % on matmul-heavy kernels, so a release A/B built from separate runs cannot see 2-3 %.
Here both builds run the same upstream script at once, each in its own worker process (its
own wheel on its own import root, `device_launch.py` in paired mode, the same GPU): at every
benchmark point both workers prepare the callable (warm-up, capture) and wait; this
coordinator has each side run `HEAT_MS` of untimed work (the GPU settles at the clock its
power cap allows), then alternates them batch by batch, ABBA (`orders`), `PAIRS` pairs of
batches of about 2 ms each, the same replays per batch on both sides, with NVML's SM clock and
throttle reasons sampled while each batch runs (and the whole state, clocks, power and
temperature, at each point's start and end). The comparison is the paired difference of
the two batches of a pair, a few ms apart, so drift in clock, power and temperature slower
than that cancels. A pair whose batches ran at SM clocks more than `CLOCK_TOLERANCE` apart is
marked and another pair measured (at most PAIRS / 2 more).

A sitting of one build against itself (two workers of one wheel) is the protocol's own A/A:
the smallest change a campaign can see is read from it (`paired_ab.py`).

Stdlib only (it runs on the GPU host, which may have nothing but torch):

    python -m kindex_etl.gpu.device_pair --harness liger_kernel-0.8.5.tar.gz \\
        --wheel 0.8.5=liger_kernel-0.8.5-py3-none-any.whl \\
        --wheel 0.8.5+kindex.slow=liger_kernel-0.8.5+kindex.slow-py3-none-any.whl \\
        --sitting aa=0.8.5,0.8.5 --sitting ab=0.8.5,0.8.5+kindex.slow \\
        --kernels swiglu,geglu --budget 500 --out OUT/campaign-NAME --campaign-id NAME
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import platform
import queue
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kindex_etl.gpu import device_time

PROTOCOL = "kindex-paired-device-time"
PROTOCOL_VERSION = 3  # 2: 12 preparations, no hold (one H100 campaign, 2026-12-07)
PAIRS = 24  # batch pairs per point, ABBA: each side first in half of them
HEAT_MS = 100.0  # untimed work per side before a point's batches
# A point whose one call or replay takes under REPREPARE_UNDER_US is prepared PREPARATIONS
# times on each side (the benchmark's own setup run again at fresh allocations, the pairs
# spread evenly over them): where a small memory-bound kernel's buffers lie differs from one
# allocation to the next (rope's liger forward on the H100: one process 2.5 % slower than the
# other in all 24 pairs of a point), so one preparation per process fixes that difference for
# the whole point; several sample it.
PREPARATIONS = 4
REPREPARE_UNDER_US = 1000.0
REHEAT_MS = 20.0  # untimed work per side after a re-preparation
# A graph batch starts after a spin kernel of HOLD_US (at the GPU's top SM clock): the host
# queues the replays while the GPU spins, so the events do not time the host's launch latency
# (on the H100 a side's first batch after the other's and its second in a row differed by up
# to 4 % in the same process before this, as whichever ran first in a pair).
HOLD_US = 100.0
# Replays (or calls) per batch: as many as last `batchTargetUs` (2 ms), up to this many. The
# single protocol's cap (20, its catalog parameters) left a 5 us kernel's batch at 0.1 ms.
MAX_REPLAYS_PER_BATCH = 1000
CLOCK_TOLERANCE = 0.03  # a pair's SM clocks (NVML, during its batches) may differ by 3 %
DEFAULT_SITTING_S = 90.0  # a sitting's estimate before any was measured
CAMPAIGN_FILE = "campaign.json"


def orders(sides: int, rounds: int) -> list[list[int]]:
    """Which side measures when, per round: every permutation in turn (two sides: AB, BA, AB,
    BA: ABBA), so each side goes first equally often and a trend within a round cancels."""
    perms = [list(p) for p in itertools.permutations(range(sides))]
    return [perms[r % len(perms)] for r in range(rounds)]


@dataclass
class Side:
    name: str  # "A" | "B"
    version: str
    site: Path


class Worker:
    """One side's script process and its two pipes (messages are JSON lines)."""

    def __init__(self, side: Side, cmd: list[str], cwd: Path, env: dict[str, str], log: Path):
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        pair = json.dumps({"rfd": to_worker_r, "wfd": from_worker_w, "side": side.name})
        self.side = side
        self.log = log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env={**env, "KINDEX_DEVICE_PAIR": pair},
            pass_fds=(to_worker_r, from_worker_w), stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        os.close(to_worker_r)
        os.close(from_worker_w)
        self.tx = os.fdopen(to_worker_w, "w", encoding="utf-8")
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.alive = True
        rx = os.fdopen(from_worker_r, "r", encoding="utf-8")
        threading.Thread(target=self._read, args=(rx,), daemon=True).start()

    def _read(self, rx: Any) -> None:
        for line in rx:
            if line.strip():
                self.messages.put(json.loads(line))
        self.messages.put(None)  # the worker closed its end: it exited

    def get(self, deadline: float) -> dict[str, Any] | None:
        try:
            message = self.messages.get(timeout=max(0.01, deadline - time.time()))
        except queue.Empty:
            message = None
        if message is None:
            self.alive = False
        return message

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.tx.write(json.dumps(message) + "\n")
            self.tx.flush()
        except (BrokenPipeError, ValueError):
            self.alive = False

    def stop(self, timeout: float = 30.0) -> int:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.tx.close()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            rc = rc if rc else -9
        self.log.close()
        return rc


def _ask(worker: Worker, message: dict[str, Any], deadline: float) -> dict[str, Any]:
    worker.send(message)
    got = worker.get(deadline)
    answer: dict[str, Any] = (got or {}).get("answer") or {"error": "no answer"}
    return answer


def batch_size(ready: dict[str, Any]) -> int:
    """Replays (graph) or calls (CUPTI) per batch: about `batchTargetUs` of the first side's
    work, 1 to MAX_REPLAYS_PER_BATCH; the same on both sides."""
    params = device_time.launcher_parameters()
    us = float(ready.get("estimateUs") or 0.0)
    if us <= 0:
        return 1
    return int(min(MAX_REPLAYS_PER_BATCH, max(1, round(params["batchTargetUs"] / us))))


@functools.cache
def hold_cycles() -> int:
    """HOLD_US in SM cycles at the GPU's top SM clock (NVML; 1,980 MHz without it)."""
    mhz = gpu_facts().get("maxSmClockMHz") or 1980
    return int(HOLD_US * float(mhz))


def preparations(ready: Sequence[dict[str, Any]], pairs: int) -> int:
    """How many times each side prepares this point: PREPARATIONS where every side can make
    it again and the first side's call is under REPREPARE_UNDER_US, else once."""
    if len(ready) != 2 or not all(r.get("reprepare") for r in ready):
        return 1
    us = float(ready[0].get("estimateUs") or 0.0)
    if not 0 < us < REPREPARE_UNDER_US:
        return 1
    return max(1, min(PREPARATIONS, pairs))


def _spread(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    ca, cb = (a or {}).get("smClockMHz"), (b or {}).get("smClockMHz")
    if not ca or not cb:
        return None
    return float(cb) / float(ca) - 1


def measure_point(workers: Sequence[Worker], ready: Sequence[dict[str, Any]], pairs: int,
                  deadline: float) -> dict[str, Any]:  # fmt: skip
    """One point's batches, the sides alternating batch by batch (A B B A A B ...), after
    HEAT_MS of untimed work on each side. A pair of batches whose SM clocks (NVML, sampled
    while each batch ran) differ by more than CLOCK_TOLERANCE is kept but marked, and another
    pair is measured in its place (at most pairs / 2 more). A small point is prepared again on
    both sides (`preparations`) every pairs / preparations pairs, then heated REHEAT_MS."""
    n = batch_size(ready[0])
    hold = hold_cycles()
    for w in workers:
        _ask(w, {"op": "heat", "ms": HEAT_MS}, deadline)
    states: list[list[Any]] = [[] for _ in workers]
    plan = orders(len(workers), pairs)
    extra, i, kept = 0, 0, 0
    off_clock: list[int] = []
    wanted = preparations(ready, pairs)
    every = max(1, pairs // wanted)
    prepared: list[dict[str, Any]] = []
    while i < len(plan) and time.time() < deadline:
        if wanted > 1 and 0 < i < pairs and i % every == 0 and len(prepared) < wanted - 1:
            answers = {w.side.name: _ask(w, {"op": "prepare"}, deadline) for w in workers}
            prepared.append({"atPair": i, **answers})
            if _failed(answers):
                wanted = 1  # a side could not: the rest of the point on what it has
            for w in workers:
                _ask(w, {"op": "heat", "ms": REHEAT_MS}, deadline)
        for k in plan[i]:
            ask = {"op": "batch", "n": n, "holdCycles": hold}
            states[k].append(_ask(workers[k], ask, deadline).get("busy"))
        if len(workers) == 2:
            spread = _spread(states[0][-1], states[1][-1])
            if spread is not None and abs(spread) > CLOCK_TOLERANCE:
                off_clock.append(i)
                if extra < pairs // 2:
                    extra += 1
                    plan.append(orders(len(workers), len(plan) + 1)[-1])
        kept += 1
        i += 1
    finished = [_ask(w, {"op": "finish"}, deadline) for w in workers]
    sides = {}
    for w, f, st in zip(workers, finished, states, strict=True):
        sides[w.side.name] = {
            "ms": f.get("ms", []),
            "sm": [(s or {}).get("smClockMHz") for s in st],
            "throttle": [(s or {}).get("throttleReasons") for s in st],
            "state": f.get("state"),
            "preparations": f.get("preparations", 1),
            **({"error": f["error"]} if "error" in f else {}),
        }
    return {
        "perBatch": n,
        "preparations": 1 + sum(1 for p in prepared if not _failed(p)),
        "prepared": prepared,
        "order": ["".join(workers[k].side.name for k in o) for o in plan[:kept]],
        "offClock": off_clock,
        "extraPairs": extra,
        "heatMs": HEAT_MS,
        "batchesBySide": sides,
    }


def _failed(prepared: dict[str, Any]) -> bool:
    return any(isinstance(a, dict) and "error" in a for a in prepared.values())


def _key(ready: dict[str, Any]) -> str:
    return json.dumps([ready["point"], ready["call"]], sort_keys=True)


def run_sitting(
    harness: Path, script: str, sides: Sequence[Side], out: Path, work: Path, *,
    python: str = sys.executable, pairs: int = PAIRS, timeout_s: float = 600.0,
    args: Sequence[str] = ("--overwrite",), env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One script, its sides interleaved point by point; records to `out` (JSON lines)."""
    began = time.time()
    deadline = began + timeout_s
    params = device_time.launcher_parameters()
    workers = []
    for side in sides:
        root = work / side.name
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(harness / "benchmark", root / "benchmark")
        cwd = root / "benchmark" / "scripts"
        child = dict(env if env is not None else os.environ)
        child |= {
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(side.site), child.get("PYTHONPATH", "")) if p
            ),
            "PYTHONUNBUFFERED": "1",
            device_time.PROTOCOL_ENV: json.dumps(params),
            device_time.OUT_ENV: os.devnull,
        }
        cmd = device_time.command(python, script, args)
        workers.append(Worker(side, cmd, cwd, child, out.with_name(f"{out.stem}.{side.name}.log")))
    points = unpaired = 0
    with out.open("w", encoding="utf-8") as fh:
        while True:
            live = [w for w in workers if w.alive]
            ready = []
            for w in live:
                message = w.get(deadline) or {}
                if "ready" in message:
                    ready.append((w, message["ready"]))
            if not ready or time.time() > deadline:
                break
            keys = {_key(r) for _, r in ready}
            groups = ([ready] if len(ready) == len(workers) and len(keys) == 1
                      else [[wr] for wr in ready])  # fmt: skip
            for group in groups:
                ws, rs = [w for w, _ in group], [r for _, r in group]
                record: dict[str, Any] = {
                    "script": script,
                    "point": rs[0]["point"],
                    "call": rs[0]["call"],
                    "paired": len(group) == len(workers),
                    "sides": {
                        w.side.name: {
                            "version": w.side.version,
                            **{k: v for k, v in r.items() if k not in ("point", "call")},
                        }
                        for w, r in group
                    },
                }
                if all("error" not in r for r in rs):
                    record |= measure_point(ws, rs, pairs, deadline)
                unpaired += not record["paired"]
                points += 1
                fh.write(json.dumps(record) + "\n")
                fh.flush()
            for w, _ in ready:
                w.send({"op": "done"})
    codes = {w.side.name: w.stop(timeout=max(5.0, deadline - time.time())) for w in workers}
    return {
        "script": script,
        "sides": [{"name": s.name, "version": s.version} for s in sides],
        "returncodes": codes,
        "points": points,
        "unpairedPoints": unpaired,
        "seconds": round(time.time() - began, 2),
        "timedOut": time.time() > deadline,
        "records": out.name,
    }


def unpack_wheel(wheel: Path, dest: Path) -> Path:
    """A pure-Python wheel as an import root (its dist-info gives importlib.metadata its
    version)."""
    if not dest.is_dir():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest)  # noqa: S202 (our own wheels)
    return dest


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    if sdist.is_dir():
        return sdist
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        if not (dest / top).is_dir():
            tar.extractall(dest, filter="data")
    return dest / top


@dataclass
class Budget:
    """Whether a sitting fits the campaign's time: each estimated from measured seconds (this
    campaign's sittings of the same kernel, else a prior campaign's `measured`, else the
    default), never from a fixed table."""

    seconds: float | None
    measured: dict[str, float] = field(default_factory=dict)  # kernel -> seconds per sitting
    began: float = field(default_factory=time.time)

    def estimate(self, kernel: str) -> float:
        return self.measured.get(kernel, DEFAULT_SITTING_S)

    def fits(self, kernel: str) -> bool:
        if self.seconds is None:
            return True
        return time.time() - self.began + self.estimate(kernel) <= self.seconds

    def record(self, kernel: str, seconds: float) -> None:
        self.measured[kernel] = seconds  # the latest sitting of this kernel, as measured


def prior_measured(paths: Sequence[Path]) -> dict[str, float]:
    """Seconds per sitting per kernel from earlier campaigns' campaign.json (the largest)."""
    out: dict[str, float] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for s in data.get("sittings", []):
            if "seconds" in s and not s.get("timedOut"):
                out[s["kernel"]] = max(out.get(s["kernel"], 0.0), float(s["seconds"]))
    return out


def gpu_facts() -> dict[str, Any]:
    """The GPU's name, driver and limits as NVML gives them (empty without nvidia-ml-py)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts: dict[str, Any] = {"name": pynvml.nvmlDeviceGetName(h)}
        readers = {
            "driver": pynvml.nvmlSystemGetDriverVersion,
            "powerLimitW": lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000,
            "maxSmClockMHz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "maxMemClockMHz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
        }
        for key, read in readers.items():
            try:
                facts[key] = read()
            except Exception:
                facts[key] = None
        return facts
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}


def run_campaign(
    harness: Path, wheels: dict[str, Path], sittings: dict[str, tuple[str, str]],
    kernels: Sequence[str], out: Path, campaign_id: str, *, pairs: int = PAIRS,
    budget_s: float | None = None, measured: dict[str, float] | None = None,
    timeout_s: float = 600.0, python: str = sys.executable, work: Path | None = None,
    only: dict[str, list[str]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every kernel's sittings in turn (its A/A and its A/B adjacent in time)."""
    out.mkdir(parents=True, exist_ok=True)
    work = work or out / "work"
    harness_root = unpack_sdist(harness, work)
    sites = {v: unpack_wheel(w, work / f"site-{v}") for v, w in wheels.items()}
    budget = Budget(budget_s, dict(measured or {}))
    campaign: dict[str, Any] = {
        "campaignId": campaign_id,
        "protocol": PROTOCOL,
        "protocolVersion": PROTOCOL_VERSION,
        "deviceTime": device_time.launcher_parameters(),
        "pairs": pairs,
        "heatMs": HEAT_MS,
        "clockTolerance": CLOCK_TOLERANCE,
        "maxReplaysPerBatch": MAX_REPLAYS_PER_BATCH,
        "preparations": PREPARATIONS,
        "reprepareUnderUs": REPREPARE_UNDER_US,
        "reheatMs": REHEAT_MS,
        "holdUs": HOLD_US,
        "gpu": gpu_facts(),
        "host": {"python": platform.python_version(), "machine": platform.machine()},
        "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "budgetSeconds": budget_s,
        "sittings": [],
        "skipped": [],
    }
    for module in ("torch", "triton"):
        try:
            campaign["host"][module] = __import__(module).__version__
        except Exception:
            campaign["host"][module] = None
    (out / "sittings").mkdir(exist_ok=True)
    for kernel in kernels:
        for kind, (a, b) in sittings.items():
            if only and kind in only and kernel not in only[kind]:
                continue
            if not budget.fits(kernel):
                skip = {
                    "kernel": kernel,
                    "sitting": kind,
                    "estimateSeconds": budget.estimate(kernel),
                }
                campaign["skipped"].append(skip)
                continue
            sides = [Side("A", a, sites[a]), Side("B", b, sites[b])]
            records = out / "sittings" / f"{kernel}.{kind}.jsonl"
            result = run_sitting(harness_root, f"benchmark_{kernel}.py", sides, records,
                                 work / "tasks" / kernel, python=python, pairs=pairs,
                                 timeout_s=timeout_s)  # fmt: skip
            result |= {"kernel": kernel, "sitting": kind}
            budget.record(kernel, result["seconds"])
            campaign["sittings"].append(result)
            print(json.dumps(result), flush=True)
            (out / CAMPAIGN_FILE).write_text(json.dumps(campaign, indent=1) + "\n")
            snapshot(out, work)
    campaign["finishedAt"] = datetime.now(UTC).isoformat(timespec="seconds")
    campaign["measuredSeconds"] = budget.measured
    (out / CAMPAIGN_FILE).write_text(json.dumps(campaign, indent=1) + "\n")
    snapshot(out, work)
    shutil.rmtree(work, ignore_errors=True)
    return campaign


SNAPSHOT_ENV = "KINDEX_PAIR_SNAPSHOT"


def snapshot(out: Path, work: Path) -> None:
    """The campaign so far as a tar.gz at $KINDEX_PAIR_SNAPSHOT (written whole, then renamed):
    a device call that runs out of time still brings back every finished sitting."""
    target = os.environ.get(SNAPSHOT_ENV)
    if not target:
        return
    tmp = Path(target + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(
            out,
            arcname=out.name,
            filter=lambda i: None if Path(i.name).parts[1:2] == (work.name,) else i,
        )
    tmp.replace(target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kindex_etl.gpu.device_pair")
    parser.add_argument("--harness", type=Path, required=True, help="the sdist (or its folder)")
    parser.add_argument("--wheel", action="append", required=True, help="VERSION=WHEEL")
    parser.add_argument("--sitting", action="append", required=True, help="NAME=VERSION,VERSION")
    parser.add_argument("--kernels", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--campaign-id", required=True)
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--budget", type=float, default=None, help="seconds for the campaign")
    parser.add_argument("--measured", type=Path, action="append", default=[],
                        help="an earlier campaign.json: its sittings' seconds")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per sitting")
    parser.add_argument("--only", action="append", default=[],
                        help="NAME=KERNEL,KERNEL: that sitting for these kernels only")  # fmt: skip
    args = parser.parse_args(argv)
    wheels = {v: Path(w) for v, w in (x.split("=", 1) for x in args.wheel)}
    sittings = {}
    for s in args.sitting:
        name, pair = s.split("=", 1)
        a, b = pair.split(",")
        sittings[name] = (a, b)
    only = {n: k.split(",") for n, k in (x.split("=", 1) for x in args.only)}
    campaign = run_campaign(
        args.harness, wheels, sittings, args.kernels.split(","), args.out, args.campaign_id,
        only=only,
        pairs=args.pairs, budget_s=args.budget, measured=prior_measured(args.measured),
        timeout_s=args.timeout,
    )  # fmt: skip
    failed = [s for s in campaign["sittings"] if any(campaign_rc(s))]
    return 1 if failed else 0


def campaign_rc(sitting: dict[str, Any]) -> list[int]:
    return [rc for rc in sitting["returncodes"].values() if rc]


if __name__ == "__main__":
    raise SystemExit(main())
