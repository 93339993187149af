"""Trigger: react to liger_versions that are new to the warehouse.

`rules` decides which new versions are releases worth a GPU re-run; `rerun` records each
request exactly once (`_kindex/reruns/<version>.json`) and starts it through Prefect when an
API and a deployment are configured. docs/reruns.md has the whole story.
"""

from kindex_etl.reruns.policy import decide, is_requestable
from kindex_etl.reruns.requests import (
    EVENT_NAME,
    list_reruns,
    mark_finished,
    on_new_versions,
    prefect_api_url,
    request_rerun,
)

__all__ = [
    "EVENT_NAME",
    "decide",
    "is_requestable",
    "list_reruns",
    "mark_finished",
    "on_new_versions",
    "prefect_api_url",
    "request_rerun",
]
