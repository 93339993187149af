"""The one shared script the pages load: Plotly's library, from the installed `plotly`.

Written once per report under `reports/` with its version in the name, and referenced by a
relative URL, so the pages work from a folder, `file://` or a bucket with no network.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..storage import ObjectStore


@lru_cache(maxsize=1)
def plotly_js() -> tuple[str, bytes]:
    """(asset file name, its bytes)."""
    from plotly.offline import get_plotlyjs

    source = get_plotlyjs()
    found = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", source[:2000])
    version = found.group(1) if found else "bundled"
    return f"plotly-{version}.min.js", source.encode("utf-8")


def write_assets(store: ObjectStore, prefix: str) -> str:
    """Put the asset under `prefix` unless an object of the same size is there; its name."""
    name, data = plotly_js()
    info = store.head(prefix + name)
    if info is None or info.size != len(data):
        store.put_bytes(prefix + name, data)
    return name
