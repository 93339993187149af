"""deploy/: prefect.yaml checked strictly, the GPU job template, the Dockerfiles, setup.py.

No Prefect server here; the real deploy runs in test_server_deploy.py.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.flows.conftest import REPO, load_deploy_module

DEPLOY = REPO / "deploy"
PREFECT_FILE = DEPLOY / "prefect.yaml"
PENDING_ENTRYPOINTS = ("flows/gpu_rerun.py",)  # written in parallel; tolerated when absent


def _validate(data: dict[str, Any], tmp_path: Path) -> list[str]:
    path = tmp_path / "prefect.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    validate = load_deploy_module("validate")
    return list(validate.validate(path, REPO, missing_ok=PENDING_ENTRYPOINTS))


def _declared() -> dict[str, Any]:
    return dict(yaml.safe_load(PREFECT_FILE.read_text()))


def test_prefect_yaml_is_valid() -> None:
    validate = load_deploy_module("validate")
    assert validate.validate(PREFECT_FILE, REPO, missing_ok=PENDING_ENTRYPOINTS) == []
    missing = [p for p in PENDING_ENTRYPOINTS if not (REPO / p).is_file()]
    if missing:
        pytest.skip(f"not yet in the checkout: {missing}")
    assert validate.validate(PREFECT_FILE, REPO) == []


def test_prefect_yaml_declares_the_four_deployments() -> None:
    deps = {d["name"]: d for d in _declared()["deployments"]}
    assert deps["ingest"]["entrypoint"] == "flows/ingest.py:ingest_flow"
    assert deps["backfill"]["entrypoint"] == "flows/backfill.py:backfill_flow"
    assert deps["gpu-rerun"]["entrypoint"] == "flows/gpu_rerun.py:gpu_rerun_flow"
    assert deps["maintenance"]["entrypoint"] == "flows/maintenance.py:maintenance_flow"
    pools = [p["work_pool"]["name"] for p in deps.values()]
    assert pools == ["kindex-etl"] * 2 + ["kindex-gpu", "kindex-etl"]
    (daily,) = deps["maintenance"]["schedules"]
    assert daily["cron"].split()[2:] == ["*", "*", "*"]  # once a day
    (hourly,) = deps["ingest"]["schedules"]
    minute, *rest = hourly["cron"].split()
    assert minute.isdigit() and rest == ["*", "*", "*", "*"]  # once an hour
    assert "schedules" not in deps["backfill"] and "schedules" not in deps["gpu-rerun"]
    assert deps["backfill"]["parameters"]["trigger"] is False
    assert deps["backfill"]["parameters"]["dry_run"] is True  # a run from the UI lists first


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["deployments"][0].update(schedulez=[]), "unknown key 'schedulez'"),
        (lambda d: d["deployments"][0]["schedules"][0].update(timezon="UTC"), "schedules[0]"),
        (lambda d: d["deployments"][0]["parameters"].update(upstreem="/x"),
         "no argument 'upstreem'"),
        (lambda d: d["deployments"][0]["work_pool"].update(nmae="x"), "unknown key 'nmae'"),
        (lambda d: d["deployments"][0]["work_pool"]["job_variables"].update(imag="x"),
         "has no variable 'imag'"),
        (lambda d: d["deployments"][0]["work_pool"].update(name="kindex-elt"), "kindex-elt"),
        (lambda d: d["deployments"][0]["concurrency_limit"].update(collision_strategy="DROP"),
         "collision_strategy"),
        (lambda d: d["deployments"][0].update(entrypoint="flows/ingest.py:ingest"),
         "no @flow function 'ingest'"),
        (lambda d: d["deployments"][2]["pull"][0][
            "prefect.deployments.steps.set_working_directory"].update(directry="/x"),
         "takes no ['directry']"),
        (lambda d: d.update(deploymnets=[]), "unknown key 'deploymnets'"),
        (lambda d: d["deployments"][3]["schedules"][0].update(cron="17 3 * * *"),
         "same minute as ingest"),
        (lambda d: d["deployments"][1].update(triggers=[{
            "type": "event", "enabled": True, "match": {"prefect.resource.id": "x"},
            "expects": ["kindex.rerun.requested"],
        }]), "unknown key 'expects'"),
        (lambda d: d["deployments"][1].update(triggers=[{
            "type": "event", "expect": ["kindex.rerun.requested"],
            "parameters": {"dry_run": "{{ event.payload.x }}"}, "posture": "Reactive",
            "match_related": {"prefect.resource.role": "flow"}, "within": 0,
            "threshold": 1, "enabled": True, "name": "ok",
        }]), None),
    ],
    ids=["deployment-key", "schedule-key", "parameter", "work-pool-key", "job-variable",
         "pool-name", "collision-strategy", "entrypoint-function", "pull-step-arg", "top-level",
         "cron-collision", "trigger-key", "valid-trigger"],
)  # fmt: skip
def test_validator_catches_what_prefect_would_accept_silently(
    mutate: Any, expected: str | None, tmp_path: Path
) -> None:
    data = copy.deepcopy(_declared())
    mutate(data)
    problems = _validate(data, tmp_path)
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


def test_gpu_base_job_template_requests_a_whole_host() -> None:
    template = json.loads((DEPLOY / "gpu-base-job-template.json").read_text())
    variables = set(template["variables"]["properties"])
    placeholders = set(re.findall(r"{{\s*([\w.]+)\s*}}", json.dumps(template["job_configuration"])))
    assert placeholders <= variables, placeholders - variables
    manifest = template["job_configuration"]["job_manifest"]
    assert manifest["kind"] == "Job" and manifest["spec"]["backoffLimit"] == 0
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "prefect-job"
    # One flow run (a shard) takes every GPU of its host and fans its scripts out over them.
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "{{ gpus }}"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "{{ gpus }}"
    assert template["variables"]["properties"]["gpus"]["default"] == 8


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("name", ["Dockerfile.etl", "Dockerfile.gpu"])
def test_dockerfiles(name: str) -> None:
    ins = _instructions(DEPLOY / name)
    ops = [op for op, _ in ins]
    froms = [arg for op, arg in ins if op == "FROM"]
    assert len(froms) == 1
    if name == "Dockerfile.gpu":
        base = next(arg for op, arg in ins if op == "ARG" and arg.startswith("BASE_IMAGE="))
        assert froms == ["${BASE_IMAGE}"]
        assert re.fullmatch(r"BASE_IMAGE=pytorch/pytorch:[\w.]+-cuda[\d.]+-cudnn\d+-runtime", base)
    else:
        assert froms[0].startswith("python:3.11")
    copies = [arg.split() for op, arg in ins if op == "COPY"]
    for source in ("pyproject.toml", "kindex_etl/", "flows/", "deploy/"):
        assert any(source in c[:-1] for c in copies), source
        assert (REPO / source).exists()
    assert ops.index("COPY") > ops.index("FROM") and "RUN" in ops
    entrypoint = json.loads(next(arg for op, arg in ins if op == "ENTRYPOINT"))
    assert entrypoint == ["/opt/kindex/deploy/entrypoint.sh"]
    script = DEPLOY / "entrypoint.sh"
    assert script.stat().st_mode & 0o111 and 'exec "$@"' in script.read_text()
    assert ("WORKDIR", "/opt/kindex") in ins  # the gpu-rerun pull step's directory
    cmd = json.loads(next(arg for op, arg in ins if op == "CMD"))
    if name == "Dockerfile.etl":
        assert cmd == ["prefect", "worker", "start", "--pool", "kindex-etl"]
        # The backfill's Dask fan-out needs the extra where the flow runs.
        installs = [arg for op, arg in ins if op == "RUN" and "pip install" in arg]
        assert any('".[dask]"' in arg for arg in installs), installs
    hadolint = shutil.which("hadolint")
    if hadolint:
        done = subprocess.run([hadolint, str(DEPLOY / name)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


def test_warehouse_limit_name_follows_the_opened_store(tmp_path: Path) -> None:
    from flows.common import normalize_warehouse_url, warehouse_limit_name
    from kindex_etl.storage import open_store

    (tmp_path / "wh").mkdir()
    store = open_store(str(tmp_path / "wh"))
    for url in (str(tmp_path / "wh"), f"{tmp_path}/./wh/", f"file://{tmp_path}/wh"):
        assert normalize_warehouse_url(url) == store.url
    assert normalize_warehouse_url("s3://bucket/wh/") == "s3://bucket/wh"
    assert normalize_warehouse_url("s3://bucket") == "s3://bucket"
    assert warehouse_limit_name("s3://bucket/wh/") == warehouse_limit_name("s3://bucket/wh")
    assert warehouse_limit_name("s3://bucket/wh") != warehouse_limit_name("s3://bucket/wh2")
    assert re.fullmatch(r"kindex-warehouse-[0-9a-f]{12}", warehouse_limit_name("s3://b/w"))


def test_setup_print_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.ingest import warehouse_limit_name

    setup = load_deploy_module("setup")
    # Only what this test sets: a developer's or CI's own KINDEX_* must not decide the outcome.
    for name in [n for n in os.environ if n.startswith("KINDEX_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KINDEX_WAREHOUSE", "s3://bucket/wh")
    monkeypatch.setenv("KINDEX_UPSTREAM", "s3://bucket/up")
    monkeypatch.setenv("KINDEX_FAULT_AT", "never-copied")  # not a setting
    # Settings of this machine's local Prefect server (tests/conftest.py sets the first).
    monkeypatch.setenv("KINDEX_LOCAL_SERVER", "0")
    monkeypatch.setenv("KINDEX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KINDEX_SERVER_IDLE_S", "5")
    env = setup.kindex_env()
    assert env == {"KINDEX_UPSTREAM": "s3://bucket/up", "KINDEX_WAREHOUSE": "s3://bucket/wh"}
    lines = setup.commands(setup.warehouses([]), env, tmp_path)
    assert f"prefect gcl create {warehouse_limit_name('s3://bucket/wh')} --limit 1" in lines[-1]
    assert lines[0].startswith("prefect work-pool create kindex-etl --type process ")
    assert lines[1].startswith("prefect work-pool create kindex-gpu --type kubernetes ")
    gpu = json.loads((tmp_path / "kindex-gpu-base-job-template.json").read_text())
    assert gpu["variables"]["properties"]["env"]["default"] == env
