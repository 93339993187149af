"""kindex-etl: Liger-Kernel benchmark CSVs into a Parquet + JSON warehouse of kernelindex.dev
documents, through Prefect flows.

Exit status: 0 done; 1 failed while working (what was committed stays); 2 a usage error or a
check before starting failed (nothing was done); 130 / 143 stopped by Ctrl-C / SIGTERM (what
was committed stays; the same command continues); 141 the reader of stdout went away (`| head`:
quietly, as Unix tools do). Errors are one `kindex-etl: error:` line on stderr; `--debug` adds
the traceback.
"""

from __future__ import annotations

import argparse
import difflib
import os
import select
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from kindex_etl.cli.registry import commands

EPILOG = (
    "Settings come from the environment (KINDEX_UPSTREAM, KINDEX_WAREHOUSE, KINDEX_CATALOG_DIR, "
    "KINDEX_STATE_DIR, KINDEX_LOCAL_SERVER, ...; see kindex_etl/config.py). S3 uses the standard "
    "AWS chain. Without PREFECT_API_URL, commands share one local Prefect server "
    "(`kindex-etl server status`)."
)


class Parser(argparse.ArgumentParser):
    """argparse, but every error is one line (with a suggestion for a mistyped flag)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            known = [o for a in self._actions for o in a.option_strings]
            for sub in self._subparsers._group_actions if self._subparsers else ():
                for choice in getattr(sub, "choices", {}).values():
                    known += [o for a in choice._actions for o in a.option_strings]
            for word in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1)
                if close:
                    message += f" (did you mean {close[0]}?)"
                    break
        print(f"kindex-etl: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kindex-etl")
    except PackageNotFoundError:
        from kindex_etl import __version__

        return __version__


def _common(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    # On the top level and on every subcommand, so `kindex-etl ingest -q` works as well as
    # `kindex-etl -q ingest`. SUPPRESS on subcommands keeps a top-level value.
    default = argparse.SUPPRESS if suppress else False
    g = p.add_argument_group("output")
    x = g.add_mutually_exclusive_group()
    x.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="no progress or status lines; only errors (and --json output)",
    )
    x.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="more detail: Prefect's run logs, one line per batch",
    )
    g.add_argument(
        "--debug", action="store_true", default=default, help="on an error, print the traceback too"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="kindex-etl",
        description=__doc__,
        epilog=EPILOG,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"kindex-etl {_version()}",
        help="print the version and exit",
    )
    _common(parser, suppress=False)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    for command in commands():
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            allow_abbrev=False,
        )
        command.arguments(p)
        _common(p, suppress=True)
        p.set_defaults(func=command.run)
    return parser


def _exit_code(exc: BaseException) -> int:
    from kindex_etl.cli.checks import CheckFailed
    from kindex_etl.cli.server import PrefectUnavailable

    # ValueError is the package's "a mistake in what was asked" (flows never retry it).
    return 2 if isinstance(exc, CheckFailed | PrefectUnavailable | ValueError) else 1


def _message(exc: BaseException) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError) and exc.title == "Settings":
        # Which variables and why, on one line; never their values (a URL may hold a secret).
        return "settings: " + "; ".join(
            f"KINDEX_{'_'.join(str(part) for part in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# What a shell reports for a command killed by SIGPIPE (128 + 13): `seq 1e9 | head -1` under
# `set -o pipefail` exits so too.
CLOSED_PIPE = 141


def stdout_closed() -> bool:
    """Whether nobody reads our stdout any more (`kindex-etl regressions | head -1` after
    head's exit): a pipe whose reader is gone polls POLLERR. A BrokenPipeError from anywhere
    else (a socket to S3 or Prefect) is an error like any other."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no real stdout (a test's StringIO)
        return False


def _quiet_stdout() -> None:
    # Python flushes stdout at exit once more and would print "Exception ignored ...
    # BrokenPipeError" on stderr: what is left goes nowhere instead.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kindex_etl.cli.server import release
    from kindex_etl.cli.stops import clean_stops
    from kindex_etl.errors import KindexError

    try:
        with clean_stops(before_exit=release):
            code = int(args.func(args))
            sys.stdout.flush()  # here, where a closed pipe is caught, and not at exit
            return code
    except (KindexError, OSError, ValueError) as exc:
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            # The reader has what it wanted (`| head`): end quietly, as Unix tools do. What
            # the command committed stays committed; only its printing was cut short.
            _quiet_stdout()
            return CLOSED_PIPE
        if args.debug:
            traceback.print_exc()
        print(f"kindex-etl: error: {_message(exc)}", file=sys.stderr)
        return _exit_code(exc)
    except Exception as exc:  # not ours: still one line, the traceback with --debug
        if args.debug:
            traceback.print_exc()
        hint = "" if args.debug else " (--debug shows the traceback)"
        print(f"kindex-etl: error: {type(exc).__name__}: {_message(exc)}{hint}", file=sys.stderr)
        return 1
    finally:
        release()
        _forget_flow_runs()


def _forget_flow_runs() -> None:
    """The command's flow runs ended with it: its ledger of them goes (`kindex_etl.flow_runs`:
    what a killed command leaves is marked Crashed by the next one)."""
    from kindex_etl import flow_runs

    flow_runs.forget_ledger()


if __name__ == "__main__":
    raise SystemExit(main())
