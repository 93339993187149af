"""`kindex-etl migrate`: give a warehouse of the older format its Delta tables.

Warehouses written before the Delta tables existed hold the same Parquet files, listed only by
the kindex log. Migrating finishes any interrupted commit (as every command's recover does)
and publishes the log's head to each table's `_delta_log` (`load.delta`): add actions over
the files in place, none rewritten. Running it again changes nothing; a warehouse that is
already current is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from kindex_etl.config import settings
from kindex_etl.errors import StorageError
from kindex_etl.load import delta
from kindex_etl.load.warehouse import existing_warehouse


@dataclass
class MigrateResult:
    warehouse: str
    seq: int  # the kindex log's head, now what every Delta table holds
    published: bool  # False: the Delta tables were current already
    tables: dict[str, int] = field(default_factory=dict)  # table -> its Delta version

    def as_dict(self) -> dict[str, object]:
        return {
            "warehouse": self.warehouse,
            "seq": self.seq,
            "published": self.published,
            "tables": self.tables,
        }


def migrate(warehouse_url: str) -> MigrateResult:
    warehouse = existing_warehouse(warehouse_url)
    if warehouse is None or warehouse.head == 0:
        raise StorageError(f"no warehouse at {warehouse_url}: nothing was ever committed there")
    before = delta.published_seq(warehouse.store)
    warehouse.recover(timedelta(seconds=settings().orphan_grace_s))
    warehouse.publish_delta()
    tables = {}
    for table in (*delta.PUBLISH_ORDER, delta.DOCUMENT_FILES):
        dt = delta.open_table(warehouse.store, table)
        if dt is not None:
            tables[table] = dt.version()
    return MigrateResult(
        warehouse=warehouse.store.url,
        seq=warehouse.head,
        published=before < warehouse.head,
        tables=tables,
    )
