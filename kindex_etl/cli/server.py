"""Which Prefect API a command's flows talk to, decided before Prefect is imported.

* A configured API (`PREFECT_API_URL` in the environment or the active Prefect profile) is used
  as is, once it answers `/health` (a command never hangs on a dead one: a few seconds, then one
  line saying how to fall back).
* Otherwise (the embedded default) every command of this machine shares one local Prefect
  server, started and stopped with Prefect's own commands (`prefect server start --background`,
  `prefect server stop`), its `PREFECT_HOME` and port under `KINDEX_STATE_DIR`. A file lock
  makes sure two commands never start two; commands hold a shared lock while they run, and a
  small watcher process stops the server once it has been idle `KINDEX_SERVER_IDLE_S`.
* `KINDEX_LOCAL_SERVER=0`: Prefect's own temporary server, per command (nothing outlives it).

Importing Prefect reads `PREFECT_HOME` and its profile once; that is why the choice is made
here, from the environment and the profile file, and written back into `os.environ` first.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kindex_etl.errors import KindexError

if TYPE_CHECKING:  # the idle watcher runs this module: stdlib only (14 MiB resident, not 34)
    from kindex_etl.config import Settings

HEALTH_TIMEOUT_S = 2.0
CONFIGURED_API_BUDGET_S = 4.0
START_TIMEOUT_S = 90.0
_QUIET_PREFECT = {
    # Offline by default: no telemetry; a fresh database otherwise logs "database is locked"
    # from the telemetry task (see ../shared/NOTES.md).
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "60",
}


class PrefectUnavailable(KindexError):
    """The Prefect API cannot be used; the message says how to fall back."""


@dataclass(frozen=True)
class Api:
    url: str | None  # None: Prefect's own temporary server for this command
    source: str  # where the choice came from, for the start-up line
    started_s: float | None = None  # seconds this command spent starting the local server

    def describe(self) -> str:
        if self.url is None:
            return "Prefect: a temporary server for this command (KINDEX_LOCAL_SERVER=0)"
        started = (
            f", started in {self.started_s:.1f} s" if self.started_s is not None else ", running"
        )
        if self.source == "local server":
            return f"Prefect: local server {self.url}{started}"
        return f"Prefect: {self.url} (from {self.source})"


def configured_api_url(environ: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(url, where it was set) when the user configured an API, else None.

    An empty `PREFECT_API_URL=` in the environment means "none", even over a profile: that is
    the one-word fallback the error message offers.
    """
    env = os.environ if environ is None else environ
    if "PREFECT_API_URL" in env:
        url = env["PREFECT_API_URL"].strip()
        return (url, "PREFECT_API_URL") if url else None
    home = Path(env.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(env.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        profiles = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    name = env.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    url = str(profiles.get("profiles", {}).get(name, {}).get("PREFECT_API_URL") or "").strip()
    return (url, f"Prefect profile {name!r}") if url else None


def check_answers(url: str, source: str, budget_s: float = CONFIGURED_API_BUDGET_S) -> None:
    """Raise PrefectUnavailable unless `url` answers within `budget_s` (any HTTP reply counts:
    an API that wants a key still answers)."""
    import httpx

    deadline = time.monotonic() + budget_s
    reason = "no answer"
    for attempt in range(2):  # one retry, for a blip; a server that is down stays down
        left = deadline - time.monotonic()
        if left <= 0.1:
            break
        try:
            httpx.get(url.rstrip("/") + "/health", timeout=min(HEALTH_TIMEOUT_S, left))
            return
        except httpx.HTTPError as exc:
            reason = type(exc).__name__
        if attempt == 0:
            time.sleep(min(0.3, max(0.0, deadline - time.monotonic())))
    # A profile's URL outlives the server it named (`prefect config set PREFECT_API_URL=...`):
    # every command fails until it is unset, so say how (issue 32; docs/deploy.md).
    undo = (
        "; or forget it for good: prefect config unset PREFECT_API_URL"
        if source.startswith("Prefect profile")
        else ""
    )
    raise PrefectUnavailable(
        f"the Prefect API at {url} (from {source}) does not answer ({reason}); start that "
        f"server, or run this command on a local one: PREFECT_API_URL= kindex-etl ...{undo}"
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_alive(leader: subprocess.Popen[str]) -> bool:
    """Whether any process of `leader`'s group is left (the leader reaped, not a zombie)."""
    leader.poll()
    try:
        os.killpg(leader.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _healthy(url: str, timeout: float = HEALTH_TIMEOUT_S) -> bool:
    import httpx

    try:
        return httpx.get(url.rstrip("/") + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[IO[str]]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, mode)
        try:
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class LocalServer:
    """The machine's one shared Prefect server for kindex-etl commands."""

    def __init__(self, state_dir: str | Path, idle_s: float = 900.0) -> None:
        self.state = Path(state_dir).expanduser()
        self.home = self.state / "prefect"
        self.info_path = self.state / "server.json"
        self.lock_path = self.state / "server.lock"
        self.in_use_path = self.state / "in-use.lock"
        self.idle_s = idle_s
        self._in_use: IO[str] | None = None
        # `prefect server start --background` while this command starts the server: its
        # process group holds the server until the start is complete (`abandon_start`).
        self._starting: subprocess.Popen[str] | None = None

    # -- what is running -------------------------------------------------------------------

    def info(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.info_path.read_text())
        except (OSError, ValueError):
            return None
        return data

    def running_url(self) -> str | None:
        info = self.info()
        if info is None or not _alive(int(info.get("pid", 0))):
            return None
        url = str(info["url"])
        return url if _healthy(url) else None

    def env(self) -> dict[str, str]:
        """The environment Prefect's commands need to find this server's home."""
        return {**os.environ, **_QUIET_PREFECT, "PREFECT_HOME": str(self.home)}

    # -- start, hold, stop -----------------------------------------------------------------

    def ensure(self) -> tuple[str, float | None]:
        """The server's API URL, starting it if needed; (url, seconds spent starting or None).

        Under the lock: a second command waits for the first one's start and reuses it.
        """
        self._hold()
        with _flock(self.lock_path, fcntl.LOCK_EX):
            url = self.running_url()
            if url is not None:
                self._touch()
                return url, None
            started = time.monotonic()
            url = self._start()
            self._touch()
            return url, time.monotonic() - started

    def _start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        self._clear_stale_pid()
        port = _free_port()
        url = f"http://127.0.0.1:{port}/api"
        cmd = ["server", "start", "--background", "--host", "127.0.0.1", "--port", str(port)]
        try:
            # No services: commands need only the API; the scheduler and friends cost start-up.
            url = self._start_server(url, port, [*cmd, "--no-services"])
        except BaseException:
            self.abandon_start()  # an error or a stop (SystemExit) mid-start: no orphan
            raise
        self._starting = None  # complete: the watcher stops it once idle
        return url

    def _start_server(self, url: str, port: int, cmd: list[str]) -> str:
        from kindex_etl.ingestion import progress

        # A stop between the process's start and its being noted here would orphan it: it
        # waits for these two steps (`progress.shielded`; the signal handler defers to it).
        with progress.shielded():
            self._starting = self._popen_prefect(*cmd)
        out, err = self._starting.communicate(timeout=120)
        pid_file = self.home / "server.pid"
        if self._starting.returncode != 0 or not pid_file.exists():
            raise PrefectUnavailable(
                "could not start the local Prefect server: "
                + ((err or out).strip().splitlines() or ["no output"])[-1]
            )
        pid = int(pid_file.read_text().strip())
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url, timeout=1.0):
            if not _alive(pid) or time.monotonic() > deadline:
                self._prefect("server", "stop")
                raise PrefectUnavailable(
                    f"the local Prefect server (PREFECT_HOME={self.home}) did not come up; "
                    "try KINDEX_LOCAL_SERVER=0"
                )
            time.sleep(0.2)
        watcher = subprocess.Popen(
            [sys.executable, "-m", "kindex_etl.cli.server", str(self.state), str(self.idle_s)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives this command and its terminal's Ctrl-C
            close_fds=True,
        )
        info = {
            "url": url,
            "port": port,
            "pid": pid,
            "watcher": watcher.pid,
            "home": str(self.home),
        }
        self.info_path.write_text(json.dumps(info) + "\n")
        return url

    def _clear_stale_pid(self) -> None:
        """`server start --background` refuses to start over a pid file. A file whose process
        is gone is removed here; only a live one costs a `prefect server stop` (a Python start,
        seconds: the first command of the day should not pay it for nothing)."""
        pid_file = self.home / "server.pid"
        try:
            pid = int(pid_file.read_text().strip() or 0)
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            pid = 0
        if pid > 0 and _alive(pid):
            self._prefect("server", "stop")
        else:
            pid_file.unlink(missing_ok=True)

    def abandon_start(self) -> None:
        """Stop a server this command began to start and did not finish starting (a stop, an
        error): without this, Ctrl-C during the first command's start left a uvicorn server
        with no watcher, ppid 1, while `server status` said "not running" (issue 54).

        `prefect server start --background` runs the server as its child, in the process
        group it leads (its own session: `_popen_prefect`); the group goes, whichever of the
        two is still alive. Bounded: SIGTERM, up to 2 s, then SIGKILL.
        """
        proc, self._starting = self._starting, None
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            deadline = time.monotonic() + 2.0
            while _group_alive(proc) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _group_alive(proc):
                break
        (self.home / "server.pid").unlink(missing_ok=True)  # its process is gone

    def _popen_prefect(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "prefect", *args],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # as `_prefect`: the group is the server's (see there)
        )

    def _prefect(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "prefect", *args],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            # Its server child inherits the new session: a Ctrl-C meant for one command must not
            # stop the server every command shares.
            start_new_session=True,
        )

    def _touch(self) -> None:
        self.info_path.touch(exist_ok=True)

    def _hold(self) -> None:
        """A shared lock for this process's lifetime: the watcher never stops a server in use."""
        if self._in_use is None:
            self.state.mkdir(parents=True, exist_ok=True)
            fh = self.in_use_path.open("a")
            fcntl.flock(fh, fcntl.LOCK_SH)
            self._in_use = fh

    def release(self) -> None:
        if self._in_use is not None:
            self._touch()
            fcntl.flock(self._in_use, fcntl.LOCK_UN)
            self._in_use.close()
            self._in_use = None

    def stop(self) -> bool:
        """Stop the server (Prefect's `server stop`); True if one was running."""
        with _flock(self.lock_path, fcntl.LOCK_EX):
            info = self.info()
            was = info is not None and _alive(int(info.get("pid", 0)))
            if self.home.exists():
                self._prefect("server", "stop")
            self.info_path.unlink(missing_ok=True)
            watcher = int((info or {}).get("watcher", 0))
            if watcher and watcher != os.getpid() and _alive(watcher):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(watcher, signal.SIGTERM)  # nothing left to watch
            return was

    def watch(self) -> None:
        """The watcher's loop: stop the server once no command used it for `idle_s`."""
        step = max(1.0, min(30.0, self.idle_s / 4))
        while True:
            time.sleep(step)
            info = self.info()
            if info is None or not _alive(int(info.get("pid", 0))):
                return  # stopped by hand, or died: nothing to watch
            try:
                idle = time.time() - self.info_path.stat().st_mtime
            except OSError:
                return
            if idle < self.idle_s:
                continue
            with self.in_use_path.open("a") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a command is running on it
                try:
                    self.stop()
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)
                return


def choose_api(cfg: Settings) -> Api:
    """Decide, check and export (into os.environ) the API this command's flows use."""
    for name, value in _QUIET_PREFECT.items():
        os.environ.setdefault(name, value)
    if "prefect" in sys.modules:
        # Called in a process that already runs Prefect (a test harness, a flow, a worker):
        # its settings are the truth, and os.environ must not be rewritten under it.
        from prefect.settings import PREFECT_API_URL

        current = PREFECT_API_URL.value()
        if current:
            return Api(current, "this process's Prefect settings")
    configured = configured_api_url()
    if configured is not None:
        url, source = configured
        check_answers(url, source)
        return Api(url, source)
    if not cfg.local_server:
        os.environ.pop("PREFECT_API_URL", None)
        return Api(None, "KINDEX_LOCAL_SERVER=0")
    server = local_server(cfg)
    url, started = server.ensure()
    os.environ["PREFECT_HOME"] = str(server.home)
    os.environ["PREFECT_API_URL"] = url
    # The local server runs no services: it neither stores events nor runs automations on
    # them, so an announcement has nobody to reach and nothing to confirm with (unless the
    # environment asks all the same).
    os.environ.setdefault("KINDEX_ANNOUNCE_CONFIRM_S", "0")
    return Api(url, "local server", started)


_server: LocalServer | None = None


def local_server(cfg: Settings) -> LocalServer:
    global _server
    if _server is None:
        _server = LocalServer(cfg.state_dir, cfg.server_idle_s)
    return _server


def release() -> None:
    """The end of a command, or its stop: a start it left unfinished goes, its hold ends."""
    if _server is not None:
        _server.abandon_start()
        _server.release()


if __name__ == "__main__":
    LocalServer(sys.argv[1], float(sys.argv[2])).watch()
