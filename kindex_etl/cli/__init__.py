"""The `kindex-etl` command (`kindex_etl.cli.app`), one module per concern.

    registry   the subcommands, in one list (a new subcommand is one line there)
    commands   what each subcommand does (plain functions over `kindex_etl`)
    checks     errors first: what can be checked before Prefect starts
    server     which Prefect API the flows use; the shared local server
    display    progress on a terminal (rich) or one line per batch
    stops      Ctrl-C / SIGTERM: one line, exit 130 / 143, nothing half-visible

Kept import-free, so `python -m kindex_etl.cli.server` (the idle watcher) starts fast.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from kindex_etl.memory import keep_arrow_pages

    keep_arrow_pages()  # before anything imports pyarrow
    from kindex_etl.cli.app import main as run

    return run(argv)


__all__ = ["main"]
