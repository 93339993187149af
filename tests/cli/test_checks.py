"""Errors first on S3: missing credentials, a missing bucket, an unreachable endpoint, each in
one line and seconds, before Prefect starts (in-process: nothing here imports Prefect)."""

from __future__ import annotations

import sys
import time

import pytest

from kindex_etl.cli.app import main
from kindex_etl.cli.server import _free_port


def _run(capsys, *argv: str) -> tuple[int, str, float]:
    started = time.monotonic()
    code = main(list(argv))
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kindex-etl: error: "), err
    return code, err[0], elapsed


def test_missing_credentials(tmp_path, capsys, monkeypatch, moto_server, s3_bucket):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-role lookup
    code, line, elapsed = _run(
        capsys, "ingest", "--upstream", f"s3://{s3_bucket}/up", "--warehouse", str(tmp_path / "w")
    )
    assert code == 2 and "no AWS credentials found" in line and elapsed < 5


@pytest.mark.parametrize(
    "argv", [["quarantine"], ["triage", "0123456789abcdef", "--state", "invalid"]], ids=" ".join
)
def test_missing_bucket(tmp_path, capsys, moto_server, argv):
    # Issue 54: triage printed a raw `_kindex/last_checkpoint.json ... NoSuchBucket`.
    code, line, elapsed = _run(capsys, *argv, "--warehouse", "s3://kindex-no-such-bucket-4f1c/wh")
    assert code == 2 and line.startswith("kindex-etl: error: warehouse: ") and elapsed < 5
    assert "no such bucket" in line


def test_triage_of_a_missing_folder_says_warehouse(tmp_path, capsys):
    # Issue 54: "not a directory" without the `warehouse:` every other command says.
    code, line, _ = _run(
        capsys, "triage", "0123456789abcdef", "--state", "invalid", "--warehouse", f"{tmp_path}/x"
    )
    assert code == 2 and line == f"kindex-etl: error: warehouse: not a directory: {tmp_path}/x"
    assert not (tmp_path / "x").exists()


def test_unreachable_endpoint(tmp_path, capsys, monkeypatch, moto_server, s3_bucket):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    code, line, elapsed = _run(
        capsys, "ingest", "--upstream", f"s3://{s3_bucket}/up", "--warehouse", str(tmp_path / "w")
    )
    assert code == 2 and "cannot reach S3" in line and elapsed < 5
    assert not (tmp_path / "w").exists()


def test_checks_do_not_import_prefect(tmp_path, capsys):
    before = "prefect" in sys.modules
    assert main(["quarantine", "--warehouse", str(tmp_path / "typo")]) == 2
    assert ("prefect" in sys.modules) == before
    capsys.readouterr()


def test_a_good_bucket_passes_the_check(moto_server, s3_bucket):
    from kindex_etl.cli import checks

    assert checks.store(f"s3://{s3_bucket}/wh", what="warehouse").url == f"s3://{s3_bucket}/wh"


def test_a_setting_that_does_not_parse_is_one_line_from_a_fresh_process(tmp_path):
    # A fresh interpreter: the command reads the settings before pyarrow is imported
    # (`memory.keep_arrow_pages`), which in-process tests never reach.
    import os
    import subprocess

    env = {**os.environ, "KINDEX_WRITE_AHEAD": "abc", "KINDEX_ARROW_DECAY_MS": "soon"}
    env.pop("JE_ARROW_MALLOC_CONF", None)
    done = subprocess.run(
        [sys.executable, "-m", "kindex_etl.cli", "ingest", "--upstream", str(tmp_path / "up"),
         "--warehouse", str(tmp_path / "wh")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    err = done.stderr.strip().splitlines()
    assert done.returncode != 0
    assert len(err) == 1 and err[0].startswith("kindex-etl: error: "), err
    assert "KINDEX_WRITE_AHEAD: Input should be a valid integer" in err[0]
    assert "KINDEX_ARROW_DECAY_MS" in err[0]
    assert "abc" not in err[0] and "soon" not in err[0]  # values are not echoed
