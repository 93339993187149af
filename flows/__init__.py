"""Prefect flows: thin orchestration over kindex_etl's plain functions."""

from kindex_etl.memory import keep_arrow_pages

keep_arrow_pages()  # before the flows' modules import pyarrow (a deployment's process)
