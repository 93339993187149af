"""One colour per provider, the same on every page and in every report.

Known providers have fixed colours; any other gets one from a spare palette chosen by a hash
of its name, not by its position on a page (which is what made colours move between pages).
"""

from __future__ import annotations

import hashlib

PROVIDERS = {
    "liger": "#1f77b4",
    "torch": "#ff7f0e",
    "huggingface": "#2ca02c",
    "torch_compile": "#9467bd",
    "megatron": "#8c564b",
    "triton": "#e377c2",
    "deepspeed_tiled": "#bcbd22",
    "liger_tiled": "#17becf",
}
SPARE = ("#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#dbdb8d")

STATES = {
    "alert": "#c62828",
    "improvement": "#2e7d32",
    "pending": "#ef8f00",
    "environment": "#6d4c9f",
    "harness": "#546e7a",
}


def provider_color(provider: str) -> str:
    if provider in PROVIDERS:
        return PROVIDERS[provider]
    h = int(hashlib.sha256(provider.encode()).hexdigest()[:8], 16)
    return SPARE[h % len(SPARE)]


def state_color(state: str) -> str:
    return STATES.get(state, "#777777")
