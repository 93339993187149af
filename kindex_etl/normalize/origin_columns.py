"""The runs' `origin`, `commit_sha` and `commit_position` columns, from the object's key.

One object has one origin and (per-commit file) one commit: computed once per object, not per
row, with one exception: a row of a per-commit file measured before its commit existed did not
measure it (upstream's first automated folder, 53a37a5, holds a copy of the cumulative file's
rows). Such rows are `contributed`, with no commit, like the cumulative file's own; a day of
margin keeps a run of the commit whose clock was not UTC. A re-run's commit is its release
tag's (`v<liger_version>`), which only the history catalog knows; the position too. Unknown
stays null: the analysis resolves positions again from the catalog it runs with, which may know
commits that this ingest's did not.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.extract.history import History, default_history
from kindex_etl.extract.origin import CONTRIBUTED, RERUN, identity_of

# How much earlier than its commit's date a run may be stamped and still have measured it.
CLOCK_MARGIN = timedelta(days=1)


def origin_columns(
    source_key: str,
    software: str,
    versions: pa.Array,
    history: History | None = None,
    observed: pa.Array | None = None,
) -> dict[str, pa.Array]:
    """`versions`: each run's liger_version (for re-runs whose key names no release);
    `observed`: each run's time (UTC timestamps), to tell a per-commit file's copied rows."""
    hist = default_history() if history is None else history
    n = len(versions)
    ident = identity_of(source_key, software=software)
    origin = pa.array([ident.origin] * n, pa.string())
    if ident.origin == RERUN and ident.commit_sha is None:
        if ident.tag is not None:
            commit = hist.tag_commit(ident.tag)
            shas = pa.array([commit.sha if commit else None] * n, pa.string())
        else:
            encoded = pc.dictionary_encode(pc.cast(versions, pa.string()))
            tags = [hist.tag_commit(f"v{v}") for v in encoded.dictionary.to_pylist()]
            shas = pa.array([c.sha if c else None for c in tags], pa.string()).take(encoded.indices)
    else:
        shas = pa.array([ident.commit_sha] * n, pa.string())
        commit = hist.commit(ident.commit_sha)
        if commit is not None and commit.date and observed is not None and n:
            since = datetime.fromisoformat(commit.date) - CLOCK_MARGIN
            before = pc.fill_null(pc.less(observed, pa.scalar(since, observed.type)), False)
            if pc.any(before).as_py():
                shas = pc.if_else(before, pa.scalar(None, pa.string()), shas)
                origin = pc.if_else(before, CONTRIBUTED, origin)
    distinct = pc.unique(shas).to_pylist()
    where = {s: hist.position(s) for s in distinct}
    positions = pa.array([where[s] for s in distinct], pa.int64()).take(
        pc.index_in(shas, value_set=pa.array(distinct, pa.string()))
    )
    return {"origin": origin, "commit_sha": shas, "commit_position": positions}
