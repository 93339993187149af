"""The runs' `origin`, `commit_sha` and `commit_position` columns, from the object's key.

One object has one origin and (per-commit file) one commit: computed once per object, not per
row. A re-run's commit is its release tag's (`v<liger_version>`), which only the history
catalog knows; the position too. Unknown stays null: the analysis resolves positions again from
the catalog it runs with, which may know commits that this ingest's did not.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kindex_etl.extract.history import History, default_history
from kindex_etl.extract.origin import RERUN, identity_of


def origin_columns(
    source_key: str, software: str, versions: pa.Array, history: History | None = None
) -> dict[str, pa.Array]:
    """`versions`: each run's liger_version (for re-runs whose key names no release)."""
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
    distinct = pc.unique(shas).to_pylist()
    where = {s: hist.position(s) for s in distinct}
    positions = pa.array([where[s] for s in distinct], pa.int64()).take(
        pc.index_in(shas, value_set=pa.array(distinct, pa.string()))
    )
    return {"origin": origin, "commit_sha": shas, "commit_position": positions}
