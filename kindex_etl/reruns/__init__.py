"""Trigger: react to liger_versions that are new to the warehouse.

`policy` decides which new versions are releases worth a GPU re-run; `requests` records each
request exactly once (`_kindex/reruns/<version>.json`) with the release to measure it against;
`launch` starts it through Prefect (one flow run per shard) when an API and a deployment are
configured. docs/reruns.md has the whole story.
"""

from kindex_etl.reruns.launch import EVENT_NAME
from kindex_etl.reruns.policy import decide, is_requestable
from kindex_etl.reruns.requests import (
    baseline_for,
    list_reruns,
    mark_finished,
    on_new_versions,
    prefect_api_url,
    request_rerun,
)

__all__ = [
    "EVENT_NAME",
    "baseline_for",
    "decide",
    "is_requestable",
    "list_reruns",
    "mark_finished",
    "on_new_versions",
    "prefect_api_url",
    "request_rerun",
]
