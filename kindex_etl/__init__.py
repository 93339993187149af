"""kindex-etl: Liger-Kernel benchmark CSVs into a Parquet + JSON warehouse.

Public entry points: `kindex_etl.pipeline.ingest` (plain function), `flows.ingest.ingest_flow`
(the same as a Prefect flow), and the `kindex-etl` command.
"""

__version__ = "0.1.0"
