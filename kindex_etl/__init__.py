"""kindex-etl: Liger-Kernel benchmark CSVs into a Parquet + JSON warehouse.

The public API (plain functions; the Prefect flows in `flows/` and the `kindex-etl` command
are built on these):

    ingest(upstream_url, warehouse_url, IngestOptions(...)) -> IngestSummary
    replay(warehouse_url, catalog=...)                       -> IngestSummary
    open_quarantine(warehouse_url)                           -> pyarrow.Table
    open_warehouse(warehouse_url, create=...)                -> Warehouse
    load_catalog(dir) / default_catalog()                    -> Catalog

Names are loaded on first use, so `import kindex_etl.gpu` on a GPU host with only torch does
not pull in pyarrow and Prefect.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ingest": "kindex_etl.api",
    "replay": "kindex_etl.ingestion",
    "open_quarantine": "kindex_etl.ingestion",
    "IngestOptions": "kindex_etl.ingestion",
    "IngestSummary": "kindex_etl.ingestion",
    "open_warehouse": "kindex_etl.load.warehouse",
    "Warehouse": "kindex_etl.load.warehouse",
    "load_catalog": "kindex_etl.catalog",
    "default_catalog": "kindex_etl.catalog",
    "Catalog": "kindex_etl.catalog",
}

__all__ = [
    "Catalog",
    "IngestOptions",
    "IngestSummary",
    "Warehouse",
    "default_catalog",
    "ingest",
    "load_catalog",
    "open_quarantine",
    "open_warehouse",
    "replay",
]

if TYPE_CHECKING:
    from kindex_etl.api import ingest
    from kindex_etl.catalog import Catalog, default_catalog, load_catalog
    from kindex_etl.ingestion import IngestOptions, IngestSummary, open_quarantine, replay
    from kindex_etl.load.warehouse import Warehouse, open_warehouse


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kindex_etl' has no attribute {name!r}")
    return getattr(import_module(module), name)
