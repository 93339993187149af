"""Every subcommand, in one list: adding one is a module with a `COMMAND` and one line here."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


# "module:attribute" of each Command, in the order `kindex-etl --help` lists them.
SUBCOMMANDS = (
    "kindex_etl.cli.commands:INGEST",
    "kindex_etl.cli.commands:BACKFILL",
    "kindex_etl.cli.commands:REPLAY",
    "kindex_etl.cli.commands:REPROCESS",
    "kindex_etl.cli.findings:QUARANTINE",
    "kindex_etl.cli.commands:RERUNS",
    "kindex_etl.cli.commands:RERUN",
    "kindex_etl.cli.findings:REGRESSIONS",
    "kindex_etl.cli.triage:TRIAGE",
    "kindex_etl.cli.maintenance:COMPACT",
    "kindex_etl.cli.maintenance:VACUUM",
    "kindex_etl.cli.migrate:MIGRATE",
    "kindex_etl.cli.commands:SCHEMA",
    "kindex_etl.cli.commands:SERVER",
    "kindex_etl.cli.commands:DEMO",
)


def commands() -> list[Command]:
    out = []
    for ref in SUBCOMMANDS:
        module, _, attr = ref.partition(":")
        out.append(getattr(import_module(module), attr))
    return out
