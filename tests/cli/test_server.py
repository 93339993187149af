"""Which Prefect API: a configured one that is down fails in seconds with one line; otherwise
one local server is shared, never started twice, and stopped when idle."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kindex_etl.cli import server as srv
from tests.cli.conftest import kindex
from tests.helpers import seed_row, write_csv


def _closed_port() -> int:
    return srv._free_port()  # nothing listens there once the probe socket is closed


@pytest.mark.parametrize("where", ["env", "profile"])
def test_a_configured_api_that_is_down_fails_fast_in_one_line(tmp_path, cli_env, where):
    # One new object: work that needs the API (a run with nothing to do never asks for it).
    write_csv(tmp_path / "up" / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    url = f"http://127.0.0.1:{_closed_port()}/api"
    env = dict(cli_env)
    if where == "env":
        env["PREFECT_API_URL"] = url
    else:
        home = tmp_path / "prefect-home"
        home.mkdir()
        (home / "profiles.toml").write_text(
            f'active = "ops"\n[profiles.ops]\nPREFECT_API_URL = "{url}"\n'
        )
        env["PREFECT_HOME"] = str(home)
    started = time.monotonic()
    done = kindex(
        env, "ingest", "--upstream", str(tmp_path / "up"), "--warehouse", str(tmp_path / "wh")
    )
    # The check itself is bounded by 4 s (timed in-process below); the rest is interpreter
    # start on a busy 2-core machine.
    assert time.monotonic() - started < 15
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kindex-etl: error: the Prefect API at ")
    assert url in lines[0] and "PREFECT_API_URL= kindex-etl" in lines[0]
    assert ("'ops'" in lines[0]) == (where == "profile")
    # Issue 32: after `prefect config set PREFECT_API_URL=...` and that server's stop, every
    # command failed until `prefect config unset`, which nothing said.
    assert ("prefect config unset PREFECT_API_URL" in lines[0]) == (where == "profile")


def test_the_check_of_a_dead_api_takes_under_five_seconds():
    started = time.monotonic()
    with pytest.raises(srv.PrefectUnavailable):
        srv.check_answers(f"http://127.0.0.1:{_closed_port()}/api", "PREFECT_API_URL")
    assert time.monotonic() - started < 5


def test_an_empty_api_url_overrides_the_profile(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    (home / "profiles.toml").write_text(
        'active = "x"\n[profiles.x]\nPREFECT_API_URL = "http://h/api"\n'
    )
    assert srv.configured_api_url({"PREFECT_HOME": str(home)}) == (
        "http://h/api",
        "Prefect profile 'x'",
    )
    assert srv.configured_api_url({"PREFECT_HOME": str(home), "PREFECT_API_URL": ""}) is None


def test_commands_share_the_warm_local_server(tmp_path, cli_env, warm_server, state_dir):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    pid = json.loads((state_dir / "server.json").read_text())["pid"]
    for sha in ("def5678", "0123abc"):
        done = kindex(
            cli_env, "ingest", "--upstream", str(upstream), "--warehouse", str(warehouse), "--json"
        )
        assert done.returncode == 0, done.stderr
        assert f"Prefect: local server {warm_server}, running" in done.stderr
        write_csv(upstream / "benchmarks" / f"{sha}-v0.8.0" / "benchmark.csv", [seed_row()])
    assert json.loads(done.stdout)["objects_skipped"] == 1
    assert json.loads((state_dir / "server.json").read_text())["pid"] == pid
    status = json.loads(kindex(cli_env, "server", "status", "--json").stdout)
    assert status == {
        "running": True,
        "url": warm_server,
        "home": str(state_dir / "prefect"),
        "pid": pid,
    }


def test_two_commands_never_start_two_servers(tmp_path, monkeypatch):
    starts = []

    def slow_start(self):
        starts.append(threading.get_ident())
        time.sleep(0.5)  # a start takes seconds: the other command must wait, not start too
        self.info_path.write_text(json.dumps({"url": "http://127.0.0.1:1/api", "pid": 1}))
        return "http://127.0.0.1:1/api"

    monkeypatch.setattr(srv.LocalServer, "_start", slow_start)
    monkeypatch.setattr(
        srv.LocalServer, "running_url",
        lambda self: (self.info() or {}).get("url"),
    )  # fmt: skip
    urls = []
    threads = [
        threading.Thread(target=lambda: urls.append(srv.LocalServer(tmp_path).ensure()))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(starts) == 1
    assert sorted(started is None for _, started in urls) == [False, True, True]


def test_the_watcher_stops_an_idle_server_but_not_one_in_use(tmp_path):
    # A stand-in server process and its pid file: `prefect server stop` (Prefect's own command,
    # run by the watcher) must end it once the server is idle and no command holds it.
    state = tmp_path / "state"
    home = state / "prefect"
    home.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (home / "server.pid").write_text(str(sleeper.pid))
        (state / "server.json").write_text(
            json.dumps({"url": "http://127.0.0.1:1/api", "pid": sleeper.pid})
        )
        server = srv.LocalServer(state, idle_s=1.0)
        with (state / "in-use.lock").open("a") as held:
            fcntl.flock(held, fcntl.LOCK_SH)  # a command is running
            watcher = threading.Thread(target=server.watch, daemon=True)
            watcher.start()
            time.sleep(2.5)
            assert sleeper.poll() is None and (state / "server.json").exists()
            fcntl.flock(held, fcntl.LOCK_UN)
        watcher.join(timeout=60)
        assert not watcher.is_alive()
        assert sleeper.wait(timeout=10) is not None
        assert not (state / "server.json").exists()
    finally:
        sleeper.kill()


def test_the_watcher_process_imports_the_standard_library_only():
    # It lives as long as the server, beside every command: pydantic's settings alone were
    # 20 MiB of its resident memory.
    code = (
        "import sys, kindex_etl.cli.server; "
        "print(sorted(m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
        "{'pydantic', 'pydantic_settings', 'prefect', 'pyarrow', 'numpy'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _dead_api_env(cli_env: dict[str, str], tmp_path) -> dict[str, str]:
    """A configured API that nobody serves, and a state folder of its own: a command that
    contacts Prefect fails (exit 2), one that starts the local server leaves server.json."""
    state = tmp_path / "state"
    return {
        **cli_env,
        "PREFECT_API_URL": f"http://127.0.0.1:{_closed_port()}/api",
        "KINDEX_STATE_DIR": str(state),
    }


def test_a_run_with_nothing_to_do_answers_without_prefect(tmp_path, cli_env):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    for sha in ("abc1234", "def5678"):
        write_csv(upstream / "benchmarks" / f"{sha}-v0.8.0" / "benchmark.csv", [seed_row()])
    from kindex_etl import IngestOptions, ingest

    ingest(str(upstream), str(warehouse), IngestOptions(trigger=False))  # every object is in now
    from kindex_etl.analysis.run import run_regressions

    run_regressions(str(warehouse))  # and analysed, as an ingest's chained analysis leaves it
    env = _dead_api_env(cli_env, tmp_path)
    args = ("--upstream", str(upstream), "--warehouse", str(warehouse))
    done = kindex(env, "ingest", *args, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["objects_seen"], summary["objects_skipped"], summary["commits"]) == (2, 2, [])
    assert done.stderr.strip() == "kindex-etl: nothing to do: answered without a flow run"
    dry = kindex(env, "backfill", "--dry-run", *args, "--json")
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)["objects"]
    assert [o["status"] for o in listed] == ["would-ingest"] * 2
    assert not (tmp_path / "state").exists()  # no local server was started either
    # New work does need Prefect: the dead API is reported, as before.
    write_csv(upstream / "benchmarks" / "0123abc-v0.8.0" / "benchmark.csv", [seed_row()])
    busy = kindex(env, "ingest", *args)
    assert busy.returncode == 2 and "does not answer" in busy.stderr


def test_a_warehouse_left_mid_publish_is_work_even_with_nothing_new(tmp_path, cli_env):
    upstream, warehouse = tmp_path / "up", tmp_path / "wh"
    write_csv(upstream / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    from kindex_etl import IngestOptions, ingest

    ingest(str(upstream), str(warehouse), IngestOptions(trigger=False))
    # What a crash between commit and publish leaves: a staged file the recovery must finish.
    staged = warehouse / "_kindex" / "staging" / "0123456789abcdef" / "part.parquet"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"")
    done = kindex(
        _dead_api_env(cli_env, tmp_path), "ingest",
        "--upstream", str(upstream), "--warehouse", str(warehouse),
    )  # fmt: skip
    assert done.returncode == 2 and "does not answer" in done.stderr


def _processes_of(state: Path) -> dict[int, str]:
    """Live processes (not zombies) of this state dir's server: the Prefect CLI starting it and
    the server itself (their environment names its PREFECT_HOME), and the idle watcher (its
    command line names the state dir). pid -> what it is."""
    home = f"PREFECT_HOME={state / 'prefect'}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        watcher = "kindex_etl.cli.server" in cmdline and str(state) in cmdline
        if home in environ or watcher:
            found[int(entry.name)] = cmdline
    return found


def _when(milestone: str, state: Path) -> bool:
    pid_file = state / "prefect" / "server.pid"
    if milestone == "started":
        return True
    if milestone == "home made":  # the command has begun the start
        return (state / "prefect").is_dir()
    if milestone == "server spawned":  # Prefect's CLI has started uvicorn
        return pid_file.is_file() and pid_file.read_text().strip() != ""
    # "migrating": uvicorn has been up a while (a fresh database takes seconds to migrate)
    return pid_file.is_file() and time.time() - pid_file.stat().st_mtime > 2.0


@pytest.mark.parametrize("milestone", ["started", "home made", "server spawned", "migrating"])
def test_a_stop_at_any_point_of_the_server_start_leaves_no_orphan(tmp_path, milestone):
    """Issue 54: Ctrl-C while the first command started the local server left a uvicorn
    server (ppid 1, no idle watcher) while `server status` said "not running"."""
    from tests.cli.conftest import clean_env

    state = tmp_path / "state"
    env = clean_env(KINDEX_STATE_DIR=str(state), HOME=str(tmp_path / "home"))
    write_csv(tmp_path / "up" / "benchmarks" / "abc1234-v0.8.0" / "benchmark.csv", [seed_row()])
    argv = ["ingest", "--upstream", str(tmp_path / "up"), "--warehouse", str(tmp_path / "wh")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kindex_etl.cli", *argv],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _when(milestone, state):
            assert proc.poll() is None and time.monotonic() < deadline, milestone
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        # 130: our handler; -SIGINT: Python's own, before the command installed it.
        assert proc.returncode in (130, -signal.SIGINT), err
        status = kindex(env, "server", "status", "--json")
        assert status.returncode == 0, status.stderr
        running = json.loads(status.stdout)["running"]
        left = _processes_of(state)
        if running:  # the start was complete: a whole server, with its watcher
            assert any("kindex_etl.cli.server" in c for c in left.values()), left
        else:
            assert left == {}, f"orphans at {milestone!r}: {left}"
    finally:
        proc.kill()
        proc.wait()
        for pid in _processes_of(state):  # what this test started, should it have failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
