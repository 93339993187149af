"""Run a re-run campaign of liger-kernel release V (and its baseline V-1) on this host's GPUs.

Plain Python, no Prefect: `flows/gpu_rerun.py` runs the same three steps with one Prefect task
per script spread over the GPUs; `run_campaign` runs them one script after another (tests, and
hosts without Prefect).

1. `prepare`: fetch and verify V's sdist (its harness measures both versions, so the only thing
   that differs between A and B is the installed liger-kernel), make V and V-1 importable each
   in its own folder (wheel or index via `pip --no-deps --target`, else an sdist's src/) and
   check in the scripts' interpreter that each reports its own version; probe the environment
   and refuse with `NoGPUError` when torch sees no GPU; plan the suite (suite.plan_suite: every
   script unless told, skips with reasons, per-script timeouts); take this shard's scripts and
   spread them over the GPUs (plan.balance).
2. `run_script`: one script on one GPU (CUDA_VISIBLE_DEVICES), in a private copy of the
   harness's benchmark/ folder (scripts upsert into its data file, so two scripts at once must
   not share it), its (version, repeat) slots interleaved (plan.interleave). Each slot has its
   own timeout (its process group is killed at the limit) and log; a slot that would start
   after the campaign's time budget is skipped, not started. A failing or timed-out slot never
   stops the others.
3. `finish`: per (version, repeat), one folder with benchmark.csv (the rows its slots wrote,
   collect.new_rows), with --device-time device_time.json and device_time.csv (its points as
   rows of their own, device_time.csv_rows), environment.json, run.json and logs/, uploaded to
   `reruns/<version>/<run-id>/` of the upstream, the CSV last (an ingest that sees the CSV also
   sees its environment.json); and campaign.json with everything.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kindex_etl.errors import NoGPUError
from kindex_etl.gpu import collect, device_time, harness, plan
from kindex_etl.gpu.environment import collect_environment, query_gpus
from kindex_etl.gpu.suite import Script, Skipped, plan_suite

RERUNS_PREFIX = "reruns/"
_UNSET_VARS = ("LIGER_BENCH_TARGET", "LIGER_BENCH_PROVIDER_TAG")


@dataclass
class SlotResult:
    """One script, one version, one repeat."""

    kernel: str
    script: str
    version: str
    repeat: int
    run_id: str
    gpu: str | None
    gpu_uuid: str | None
    log: str
    returncode: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    rows: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    skipped: str | None = None  # why the slot was not started

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.skipped is None

    @property
    def state(self) -> str:
        if self.skipped:
            return "skipped"
        if self.timed_out:
            return "timed out"
        return "ok" if self.returncode == 0 else f"exit {self.returncode}"


@dataclass
class RunRecord:
    """One upload: one version, one repeat."""

    run_id: str
    version: str
    repeat: int
    role: str  # "candidate" (V) or "baseline" (V-1)
    rows: int
    slots: list[SlotResult]
    output_dir: str
    uploaded_to: str | None = None
    uploaded_keys: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rows > 0 and all(s.ok for s in self.slots)


@dataclass
class CampaignResult:
    campaign_id: str
    version: str
    baseline: str | None
    repeats: int
    shard_index: int
    shard_count: int
    host: str
    gpus: list[str | None]
    started_at: str
    finished_at: str
    runs: list[RunRecord]
    skipped: list[Skipped]
    environment: dict[str, Any]
    sdist: dict[str, str]
    output_dir: str

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.runs)

    @property
    def ok(self) -> bool:
        return bool(self.runs) and all(r.ok for r in self.runs)

    @property
    def run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ok=self.ok, rows=self.rows, run_ids=self.run_ids)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CampaignResult:
        """The inverse of `as_dict` (what a flow run returns, or campaign.json)."""
        fields = {k: v for k, v in data.items() if k not in ("ok", "rows", "run_ids")}
        fields["runs"] = [
            RunRecord(**(r | {"slots": [SlotResult(**s) for s in r["slots"]]}))
            for r in data["runs"]
        ]
        fields["skipped"] = [Skipped(**s) for s in data["skipped"]]
        return cls(**fields)


@dataclass
class Prepared:
    """Everything `run_script` and `finish` need; picklable (Prefect tasks receive it)."""

    campaign_id: str
    version: str
    baseline: str | None
    repeats: int
    shard_index: int
    shard_count: int
    python: str
    work: str
    out: str
    harness_root: str
    libs: dict[str, str]  # version -> folder first on PYTHONPATH
    environments: dict[str, dict[str, Any]]  # version -> environment.json
    scripts: list[Script]
    skipped: list[Skipped]
    gpus: list[str | None]
    assignment: dict[str, str | None]  # kernel -> GPU
    slots: list[plan.Slot]
    sdist: dict[str, str]
    started_at: str
    deadline: float | None  # time.time() after which no slot starts
    device_time: bool = False  # also time every point by device time (device_time.py)
    # `work` is a temporary folder this campaign made (no workdir given): `finish` removes it.
    scratch: bool = False

    def gpu_uuid(self, gpu: str | None) -> str | None:
        for g in self.environments[self.version].get("gpus") or []:
            if gpu is not None and g.get("index") == gpu:
                return str(g.get("uuid")) if g.get("uuid") else None
        return None


@contextlib.contextmanager
def _removed_on_error(folder: Path | None) -> Iterator[None]:
    try:
        yield
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def new_campaign_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"


def rerun_prefix(version: str, run_id: str) -> str:
    return f"{RERUNS_PREFIX}{version}/{run_id}/"


def child_env(
    libdir: Path | str,
    *,
    harness_root: Path | str | None = None,
    gpu: str | None = None,
    base: dict[str, str] | None = None,
) -> dict[str, str]:
    """The scripts' environment: this version's liger first, then the sdist root (its `test`
    package, which some scripts import), TZ=UTC for their timestamps, pinned to `gpu`."""
    env = dict(os.environ if base is None else base)
    for name in _UNSET_VARS:
        env.pop(name, None)
    parts = [str(libdir)]
    if harness_root is not None:
        parts.append(str(harness_root))
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["TZ"] = "UTC"
    env["PYTHONUNBUFFERED"] = "1"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def check_gpu(environment: dict[str, Any]) -> None:
    """Raise NoGPUError with the reason when the probe saw no usable GPU."""
    if environment.get("cudaAvailable"):
        return
    probe = environment.get("probe") or {}
    if "torch" not in (environment.get("software") or {}):
        why = probe.get("torch_error") or probe.get("probe_error") or "torch is not importable"
        raise NoGPUError(f"GPU re-runs need torch with a GPU; torch is missing here ({why})")
    raise NoGPUError(
        "GPU re-runs need a GPU; torch is installed but torch.cuda.is_available() is False"
    )


def detect_gpus(environment: dict[str, Any]) -> list[str | None]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else every GPU seen."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [g.strip() for g in visible.split(",") if g.strip()]
    listed = [str(g["index"]) for g in environment.get("gpus") or [] if g.get("index")]
    if listed:
        return list(listed)
    count = environment.get("gpuCount")
    return [str(i) for i in range(count)] if isinstance(count, int) and count > 0 else [None]


def _install(
    version: str,
    target: Path,
    *,
    wheel: str | os.PathLike[str] | None,
    sdist: str | os.PathLike[str] | None,
    use_pip_index: bool,
    python: str,
    cache: str | os.PathLike[str] | None,
    pypi: str | None,
    harness_root: Path | None,
) -> Path:
    if wheel is not None or use_pip_index:
        return harness.install_liger(
            version, target, wheel=wheel, use_pip_index=use_pip_index, python=python
        )
    if harness_root is not None:
        return harness.install_liger(version, target, sdist_root=harness_root, python=python)
    sd = harness.fetch_sdist(version, sdist=sdist, cache=cache, pypi=pypi)
    root = harness.extract_sdist(sd, target.parent / f"sdist-{version}")
    return harness.install_liger(version, target, sdist_root=root, python=python)


def prepare(
    version: str,
    *,
    baseline: str | None = None,
    kernels: Sequence[str] | None = None,
    repeats: int | None = None,
    sdist: str | os.PathLike[str] | None = None,
    sdist_sha256: str | None = None,
    wheel: str | os.PathLike[str] | None = None,
    baseline_sdist: str | os.PathLike[str] | None = None,
    baseline_wheel: str | os.PathLike[str] | None = None,
    use_pip_index: bool = False,
    output_dir: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    python: str | None = None,
    gpus: Sequence[str] | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
    script_timeout_s: float | None = None,
    budget_s: float | None = None,
    cache: str | os.PathLike[str] | None = None,
    pypi: str | None = None,
    campaign_id: str | None = None,
    device_time: bool = False,
) -> Prepared:
    """Step 1 (see the module doc). Raises NoGPUError, HarnessError or ValueError."""
    py = python or sys.executable
    if repeats is None:  # imported only here: settings need pydantic, a bare GPU host has none
        from kindex_etl.config import settings

        repeats = settings().rerun_repeats
    work = Path(workdir) if workdir is not None else harness.scratch_dir()
    # A failed preparation (no GPU, a bad sdist) leaves no temporary folder behind.
    with _removed_on_error(work if workdir is None else None):
        out = Path(output_dir) if output_dir is not None else work / "out"
        out.mkdir(parents=True, exist_ok=True)
        campaign_id = campaign_id or new_campaign_id()
        started = datetime.now(UTC)

        sd = harness.fetch_sdist(version, sdist=sdist, sha256=sdist_sha256, cache=cache, pypi=pypi)
        root = harness.extract_sdist(sd, work / "sdist")
        libs = {
            version: _install(
                version, work / f"site-{version}", wheel=wheel, sdist=None,
                use_pip_index=use_pip_index, python=py, cache=cache, pypi=pypi,
                harness_root=None if wheel is not None or use_pip_index else root,
            )
        }  # fmt: skip
        if baseline is not None:
            libs[baseline] = _install(
                baseline, work / f"site-{baseline}", wheel=baseline_wheel, sdist=baseline_sdist,
                use_pip_index=use_pip_index and baseline_wheel is None, python=py, cache=cache,
                pypi=pypi, harness_root=None,
            )  # fmt: skip
        host_gpus = query_gpus()
        environments = {}
        for v, lib in libs.items():
            environment = collect_environment(py, child_env(lib, harness_root=root), gpus=host_gpus)
            check_gpu(environment)
            if environment.get("ligerKernel") != v:
                raise harness.HarnessError(
                    f"the scripts would import liger-kernel {environment.get('ligerKernel')!r} "
                    f"({environment.get('ligerKernelPath') or environment.get('probe')}), not {v}"
                )
            environments[v] = environment
        env = environments[version]

        scripts_dir = root / "benchmark" / "scripts"
        suite, skipped = plan_suite(
            scripts_dir,
            kernels=list(kernels) if kernels else None,
            python=py,
            env=child_env(libs[version], harness_root=root),
            capability=env.get("computeCapability"),
            timeout_override_s=script_timeout_s,
        )
        slots = plan.slots(campaign_id, version, baseline, repeats, (shard_index, shard_count))
        weights = [(s.kernel, s.expected_s * len(slots)) for s in suite]
        mine = set(plan.shard(weights, shard_index, shard_count))
        suite = [s for s in suite if s.kernel in mine]
        gpu_list: list[str | None] = list(gpus) if gpus else detect_gpus(env)
        per_gpu = plan.balance([(s.kernel, s.expected_s) for s in suite], len(gpu_list))
        assignment = {k: gpu_list[i] for i, names in enumerate(per_gpu) for k in names}
        return Prepared(
            campaign_id=campaign_id,
            version=version,
            baseline=baseline,
            repeats=repeats,
            shard_index=shard_index,
            shard_count=shard_count,
            python=py,
            work=str(work),
            out=str(out),
            harness_root=str(root),
            libs={v: str(p) for v, p in libs.items()},
            environments=environments,
            scripts=suite,
            skipped=skipped,
            gpus=gpu_list,
            assignment=assignment,
            slots=slots,
            sdist={"source": sd.source, "sha256": sd.sha256, "file": sd.path.name},
            started_at=started.isoformat(timespec="seconds"),
            deadline=time.time() + budget_s if budget_s is not None else None,
            device_time=device_time,
            scratch=workdir is None,
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _run_process(
    cmd: Sequence[str], cwd: Path, env: dict[str, str], log_path: Path, timeout_s: float
) -> tuple[int | None, float, bool]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    timed_out = False
    with log_path.open("w", encoding="utf-8") as log:
        log.write(f"# cwd: {cwd}\n# command: {' '.join(cmd)}\n")
        log.write(f"# PYTHONPATH: {env.get('PYTHONPATH', '')}\n")
        log.write(f"# CUDA_VISIBLE_DEVICES: {env.get('CUDA_VISIBLE_DEVICES', '(all)')}\n")
        log.write(f"# timeout: {timeout_s:.0f} s\n# started: {_now()}\n")
        log.flush()
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            returncode = proc.wait()
        seconds = time.monotonic() - start
        log.write(
            f"\n# finished: exit {returncode}{' (timed out)' if timed_out else ''} "
            f"after {seconds:.1f} s\n"
        )
    return returncode, seconds, timed_out


DEVICE_PARTS = "device-parts"  # the launcher's JSON lines per script, until `finish`


def run_folder(prep: Prepared, version: str, run_id: str) -> Path:
    return Path(prep.out) / "runs" / version / run_id


def run_script(
    prep: Prepared, script: Script, gpu: str | None, script_args: Sequence[str] = ("--overwrite",)
) -> list[SlotResult]:
    """Step 2 (see the module doc): every slot of `script`, interleaved, on `gpu`."""
    task_dir = Path(prep.work) / "tasks" / script.kernel
    shutil.rmtree(task_dir, ignore_errors=True)
    shutil.copytree(Path(prep.harness_root) / "benchmark", task_dir / "benchmark")
    cwd = task_dir / "benchmark" / "scripts"
    data_path = task_dir / "benchmark" / "data" / "all_benchmark_data.csv"
    results = []
    last_finished = 0.0
    measured_s: float | None = None
    for slot in prep.slots:
        env_facts = prep.environments[slot.version]
        log_name = f"logs/{Path(script.name).stem}.log"
        result = SlotResult(
            kernel=script.kernel, script=script.name, version=slot.version,
            repeat=slot.repeat, run_id=slot.run_id, gpu=gpu, gpu_uuid=prep.gpu_uuid(gpu),
            log=log_name,
        )  # fmt: skip
        # The estimate is measured once measurable: this script's last finished slot of this
        # campaign (issue 53: the catalog's figure skipped geglu from its first round and left
        # 200 s of a 470 s budget unused); before that, the catalog's expectedSeconds.
        expected = measured_s if measured_s is not None else script.expected_s
        if prep.deadline is not None and time.time() + expected > prep.deadline:
            result.skipped = "the campaign's time budget would be exceeded"
            results.append(result)
            continue
        env = child_env(prep.libs[slot.version], harness_root=prep.harness_root, gpu=gpu)
        cmd = [prep.python, script.name, *script_args]
        if prep.device_time:
            records = run_folder(prep, slot.version, slot.run_id) / DEVICE_PARTS
            records.mkdir(parents=True, exist_ok=True)
            out = records / f"{script.kernel}.jsonl"
            out.unlink(missing_ok=True)  # a retried slot starts its records afresh
            env = device_time.child_env(env, out)
            cmd = device_time.command(prep.python, script.name, script_args)
        # A run's identity is its timestamp to the second: two slots of one script must never
        # share a second (only sub-second stand-ins ever wait here).
        time.sleep(max(0.0, math.floor(last_finished) + 1 - time.time()))
        before = data_path.read_bytes() if data_path.is_file() else b""
        started = datetime.now(UTC)
        result.started_at = started.isoformat(timespec="milliseconds")
        rc, seconds, timed_out = _run_process(
            cmd,
            cwd,
            env,
            run_folder(prep, slot.version, slot.run_id) / log_name,
            script.timeout_s,
        )
        result.finished_at = _now()
        last_finished = time.time()
        after = data_path.read_bytes() if data_path.is_file() else b""
        rows = collect.new_rows(
            before, after, started=started, version=slot.version,
            gpu_name=env_facts.get("gpu_name"),
        )  # fmt: skip
        part = run_folder(prep, slot.version, slot.run_id) / "parts" / f"{script.kernel}.csv"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(collect.to_csv(rows))
        result.returncode, result.seconds, result.timed_out = rc, round(seconds, 3), timed_out
        if rc == 0 and not timed_out:
            measured_s = seconds
        result.rows = len(rows)
        results.append(result)
    return results


def finish(
    prep: Prepared, results: Sequence[SlotResult], upstream: str | None = None
) -> CampaignResult:
    """Step 3 (see the module doc)."""
    runs = []
    for slot in prep.slots:
        folder = run_folder(prep, slot.version, slot.run_id)
        folder.mkdir(parents=True, exist_ok=True)
        mine = sorted((r for r in results if r.run_id == slot.run_id), key=lambda r: r.kernel)
        rows: list[dict[str, str]] = []
        for r in mine:
            part = folder / "parts" / f"{r.kernel}.csv"
            if part.is_file():
                rows += collect.read_rows(part.read_bytes())
        shutil.rmtree(folder / "parts", ignore_errors=True)
        if prep.device_time:
            device_time.write_run(folder, folder / DEVICE_PARTS)
            shutil.rmtree(folder / DEVICE_PARTS, ignore_errors=True)
        env = dict(prep.environments[slot.version])
        if not env.get("gpu_name"):
            names = sorted({r.get("gpu_name", "") for r in rows} - {""})
            if len(names) == 1:
                env["gpu_name"] = names[0]
        env["gpusUsed"] = sorted({str(r.gpu) for r in mine if r.gpu is not None})
        (folder / "benchmark.csv").write_bytes(collect.to_csv(rows))
        if prep.device_time:
            # The device-time points as runs of their own for the ingest, beside their twins.
            device_time.write_csv(folder)
        (folder / "environment.json").write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
        role = "candidate" if slot.version == prep.version else "baseline"
        runs.append(
            RunRecord(slot.run_id, slot.version, slot.repeat, role, len(rows), mine, str(folder))
        )
    result = CampaignResult(
        campaign_id=prep.campaign_id,
        version=prep.version,
        baseline=prep.baseline,
        repeats=prep.repeats,
        shard_index=prep.shard_index,
        shard_count=prep.shard_count,
        host=socket.gethostname(),
        gpus=prep.gpus,
        started_at=prep.started_at,
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        runs=runs,
        skipped=prep.skipped,
        environment=prep.environments[prep.version],
        sdist=prep.sdist,
        output_dir=prep.out,
    )
    for run in runs:
        write_manifest(result, run)
        if upstream:
            upload(result, run, upstream)
    (Path(prep.out) / "campaign.json").write_text(
        json.dumps(result.as_dict(), indent=2, sort_keys=True) + "\n"
    )
    release_scratch(prep, result)
    return result


def release_scratch(prep: Prepared, result: CampaignResult) -> bool:
    """Remove the temporary work folder the campaign made for itself (sdists, installs, its
    scripts' copies), once nothing in it is the only copy: its output lives elsewhere, or every
    run was uploaded. Otherwise a GPU host would keep one folder per campaign for good."""
    work = Path(prep.work)
    if not prep.scratch:
        return False
    uploaded = bool(result.runs) and all(r.uploaded_to for r in result.runs)
    if Path(prep.out).is_relative_to(work) and not uploaded:
        return False  # the measurements are only here: kept, at result.output_dir
    shutil.rmtree(work, ignore_errors=True)
    return True


def manifest(result: CampaignResult, run: RunRecord) -> dict[str, Any]:
    """run.json: what this run measured, how each script went, where it sits in its campaign."""
    return {
        "campaignId": result.campaign_id,
        "runId": run.run_id,
        "version": run.version,
        "role": run.role,
        "repeat": run.repeat,
        "repeats": result.repeats,
        "candidate": result.version,
        "baseline": result.baseline,
        "harness": {"version": result.version, **result.sdist},
        "shard": {"index": result.shard_index, "count": result.shard_count},
        "host": result.host,
        "gpus": result.gpus,
        "rows": run.rows,
        "ok": run.ok,
        "scripts": [asdict(s) | {"state": s.state} for s in run.slots],
        "skipped": [asdict(s) for s in result.skipped],
        "startedAt": result.started_at,
        "finishedAt": result.finished_at,
        "uploadedTo": run.uploaded_to,
        **device_time.manifest_entry(Path(run.output_dir)),
    }


def write_manifest(result: CampaignResult, run: RunRecord) -> None:
    Path(run.output_dir, "run.json").write_text(json.dumps(manifest(result, run), indent=2) + "\n")


def upload(result: CampaignResult, run: RunRecord, upstream: str) -> list[str]:
    """Copy one run's folder to `reruns/<version>/<run-id>/` of the upstream store.

    Logs, environment.json and run.json go first and the CSVs (benchmark.csv, then
    device_time.csv where the run has one) last: an ingest that sees a CSV finds its
    environment.json beside it. A run with no rows uploads no CSV (there is nothing to
    ingest), but its logs still land for reading.
    """
    from kindex_etl.storage import open_store

    store = open_store(upstream, create=True)
    out = Path(run.output_dir)
    prefix = rerun_prefix(run.version, run.run_id)
    run.uploaded_to = store.url.rstrip("/") + "/" + prefix
    write_manifest(result, run)
    tables = ("benchmark.csv", device_time.CSV_FILE)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name not in tables)
    if run.rows > 0:
        files += [out / name for name in tables if (out / name).is_file()]
    keys = []
    for path in files:
        key = prefix + path.relative_to(out).as_posix()
        store.put_bytes(key, path.read_bytes())
        keys.append(key)
    run.uploaded_keys = keys
    return keys


def run_campaign(
    version: str,
    *,
    upstream: str | None = None,
    script_args: Sequence[str] = ("--overwrite",),
    **kwargs: Any,
) -> CampaignResult:
    """prepare, every script in turn on its assigned GPU, finish: the campaign without Prefect."""
    prep = prepare(version, **kwargs)
    results: list[SlotResult] = []
    for script in prep.scripts:
        results += run_script(prep, script, prep.assignment[script.kernel], script_args)
    return finish(prep, results, upstream)
