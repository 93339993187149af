"""Prefect flows: thin orchestration over kindex_etl's plain functions."""
