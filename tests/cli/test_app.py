"""The command line's conventions: one-line errors with the right exit code, --version, help
on every flag, settings from KINDEX_*, and read-only commands that leave no trace."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kindex_etl.cli.app import build_parser, main
from tests.cli.conftest import kindex
from tests.helpers import tree_digest


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kindex-etl: error: "), stderr
    return lines[0]


def test_version_and_top_level_help(cli_env):
    done = kindex(cli_env, "--version")
    assert done.returncode == 0 and done.stdout.startswith("kindex-etl 0.")
    top = kindex(cli_env, "--help").stdout
    assert "Exit status" in top and "ingest" in top and "KINDEX_WAREHOUSE" in top


def test_every_flag_of_every_command_has_help():
    parser = build_parser()
    missing = []
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    # `rerun`'s flags are kindex_etl/gpu/command.py's (another owner): checked there, not here.
    for name, sub in [("", parser), *((n, s) for n, s in subs.choices.items() if n != "rerun")]:
        for action in sub._actions:
            if action.option_strings and not action.help:
                missing.append(f"{name} {action.option_strings[0]}")
            if not action.option_strings and action.dest not in ("command",) and not action.help:
                missing.append(f"{name} <{action.dest}>")
    assert missing == []


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["ingest", "--upstrem", "x"], 2, "did you mean --upstream?"),
        (["ingest", "--upstream", "{tmp}/missing", "--warehouse", "{tmp}/wh"], 2,
         "upstream: not a directory"),
        (["ingest", "--upstream", "ftp://example/x", "--warehouse", "{tmp}/wh"], 2,
         "unsupported URL scheme"),
        (["ingest", "--upstream", "{tmp}/up", "--warehouse", "{tmp}/file/wh"], 2, "cannot create"),
        (["quarantine", "--warehouse", "{tmp}/typo"], 2, "not a directory"),
        (["reruns", "--warehouse", "{tmp}/typo"], 2, "not a directory"),
        (["backfill", "--upstream", "{tmp}/up", "--warehouse", "{tmp}/wh", "--from-commit",
          "deadbee", "--dry-run"], 2, "commits.txt"),
        (["backfill", "--upstream", "{tmp}/up", "--min-version", "nope", "--dry-run"], 2,
         "not a version"),
        (["schema", "--format", "yaml"], 2, "invalid choice"),
    ],
)  # fmt: skip
def test_errors_are_one_line_with_the_right_exit_code(tmp_path, capsys, argv, code, message):
    # In-process: these fail before Prefect is ever imported (a subprocess proves no more).
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "a.csv").write_text("x\n")  # not empty: an empty one is an error too
    (tmp_path / "file").write_text("a file, not a folder")
    argv = [a.format(tmp=tmp_path) for a in argv]
    try:
        got = main(argv)
    except SystemExit as exc:  # argparse's own errors exit
        got = int(exc.code or 0)
    out = capsys.readouterr()
    assert got == code
    assert out.out == ""
    assert message in one_error_line(out.err)
    assert not (tmp_path / "wh").exists() or argv[0] == "ingest"


def test_commit_that_does_not_exist_fails_in_a_second(tmp_path, cli_env):
    up = tmp_path / "up"
    (up / "benchmarks").mkdir(parents=True)
    (up / "benchmarks" / "commits.txt").write_text("abc1234-v0.8.0\n")
    done = kindex(
        cli_env, "backfill", "--upstream", str(up), "--warehouse", str(tmp_path / "wh"),
        "--from-commit", "fffffff", timeout=30,
    )  # fmt: skip
    assert done.returncode == 2
    assert "'fffffff' is not in benchmarks/commits.txt" in one_error_line(done.stderr)
    assert not (tmp_path / "wh").exists()


def test_debug_adds_the_traceback(tmp_path, capsys):
    assert main(["--debug", "quarantine", "--warehouse", str(tmp_path / "typo")]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith("kindex-etl: error: ")


def test_settings_come_from_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KINDEX_WAREHOUSE", str(tmp_path / "from-env"))
    assert main(["quarantine"]) == 2
    assert str(tmp_path / "from-env") in capsys.readouterr().err


def test_read_only_commands_leave_no_trace(tmp_path, cli_env):
    """Listing on a mistyped path, schemas, status, a dry run: nothing appears anywhere."""
    root = tmp_path / "root"
    (root / "up").mkdir(parents=True)
    state = root / "state"
    env = {**cli_env, "HOME": str(root / "home"), "KINDEX_STATE_DIR": str(state)}
    before = tree_digest(root)
    for argv in (
        ["quarantine", "--warehouse", str(root / "typo")],
        ["reruns", "--warehouse", str(root / "typo"), "--json"],
        ["schema"],
        ["schema", "--tables"],
        ["server", "status", "--json"],
        ["--version"],
        ["ingest", "--help"],
    ):
        done = kindex(env, *argv, cwd=root, timeout=60)
        assert done.returncode in (0, 2), done.stderr
    assert tree_digest(root) == before
    assert sorted(p.name for p in root.iterdir()) == ["up"]
    status = json.loads(
        kindex(env, "server", "status", "--json", cwd=root).stdout
    )  # read-only: it did not start one
    assert status["running"] is False


def test_schema_exports_documents_and_tables(tmp_path, capsys):
    assert main(["schema", "--out", str(tmp_path / "docs")]) == 0
    names = sorted(p.name for p in (tmp_path / "docs").iterdir())
    assert names == [
        "BenchmarkProtocol.schema.json",
        "BenchmarkRun.schema.json",
        "ExecutionEnvironment.schema.json",
        "Implementation.schema.json",
        "Workload.schema.json",
    ]
    run = json.loads((tmp_path / "docs" / "BenchmarkRun.schema.json").read_text())
    assert run["properties"]["kind"]["const"] == "BenchmarkRun"
    capsys.readouterr()
    assert main(["schema", "--tables"]) == 0
    tables = json.loads(capsys.readouterr().out)
    runs = {c["name"]: c for c in tables["benchmark_runs"]["columns"]}
    assert runs["x_value_number"]["type"] == "double"
    assert runs["observed_at"]["type"] == "timestamp[ms, tz=UTC]"
    assert runs["latency_ns_median"]["origin"] == "row"
    assert main(["schema", "--tables", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == Path("docs/tables.md").read_text()
