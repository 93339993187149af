"""The pinned mmap threshold: large frees go back to the system (glibc, which CI runs on); the
collector tuned for bulk work; memory Arrow's pool keeps, handed back; how long Arrow's
jemalloc keeps freed pages."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

from kindex_etl.config import Settings
from kindex_etl.memory import BULK_GC_THRESHOLDS, bulk_collector

REPO = Path(__file__).resolve().parents[1]

# Big arrays made and freed between small ones that stay: what an ingest's batches do. With
# glibc's sliding threshold the big ones come from the heap after the first free, and the
# small survivors keep the heap from shrinking; pinned, each big one is its own mapping.
_CHURN = """
import json, numpy as np
from kindex_etl.memory import pin_mmap_threshold
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
pinned = pin_mmap_threshold()
np.ones(1 << 18).sum()  # one mapped block freed: glibc's threshold slides past 2 MiB
keep, before = [], rss()
for _ in range(3):
    big = [np.ones(1 << 18) for _ in range(100)]  # 100 x 2 MiB, touched
    keep += [np.ones(16) for _ in range(2000)]
    del big
print(json.dumps({"pinned": pinned, "grown_mib": (rss() - before) / 2**20}))
"""


def _script(code: str, *, drop: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    """What `code`, run in a fresh interpreter, prints as JSON; `drop`: variables to leave
    out of this environment, `env`: to set."""
    base = {k: v for k, v in os.environ.items() if k not in drop}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def _churn(threshold: str) -> dict[str, Any]:
    # Without glibc's own knobs: any MALLOC_*_ variable also stops the sliding (Dask's nanny
    # puts MALLOC_TRIM_THRESHOLD_ into the environment of the process that starts a cluster).
    drop = (*(k for k in os.environ if k.startswith("MALLOC_")), "GLIBC_TUNABLES")
    return _script(_CHURN, drop=drop, KINDEX_MALLOC_MMAP_THRESHOLD=threshold)


def test_pinned_large_frees_return_to_the_system():
    pinned = _churn(str(Settings.model_fields["malloc_mmap_threshold"].default))
    sliding = _churn("0")
    assert pinned["pinned"] is True and sliding["pinned"] is False
    assert float(pinned["grown_mib"]) < 20
    # The same churn under glibc's own threshold keeps most of the 200 MiB resident.
    assert float(sliding["grown_mib"]) > 100


# Arrow arrays made and dropped: Arrow's allocator keeps the freed pages for reuse.
_CACHED = """
import json, numpy as np, pyarrow as pa, pyarrow.compute as pc
from kindex_etl.memory import release_unused_memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
base = pa.array(np.arange(32_000))
before = rss()
made = [pc.add(base, i) for i in range(1200)]  # 1,200 x 250 KiB from Arrow's pool
assert pa.total_allocated_bytes() > 250 * 2**20
del made
freed = rss()
release_unused_memory()
print(json.dumps({"kept_mib": (freed - before) / 2**20, "after_mib": (rss() - before) / 2**20}))
"""


def test_released_memory_leaves_the_process():
    # mimalloc, Arrow's default: it kept all 300 MiB here. (jemalloc, which bulk work uses
    # where it can, kept ~96 MiB of them, and `release_unused` did not shrink that.)
    out = _script(_CACHED, ARROW_DEFAULT_MEMORY_POOL="mimalloc")
    # Freed but still resident (the premise), then given back.
    assert out["kept_mib"] > 200
    assert out["after_mib"] < 50


def test_bulk_collector_raises_thresholds_then_restores_them():
    before = gc.get_threshold()
    with bulk_collector():
        inside = gc.get_threshold()
        assert all(i >= b for i, b in zip(inside, BULK_GC_THRESHOLDS, strict=True))
        assert gc.get_freeze_count() > 0  # what was alive at the first batch is frozen
    assert gc.get_threshold() == before


def test_bulk_collector_never_lowers_a_higher_threshold():
    before = gc.get_threshold()
    gc.set_threshold(10**6, 50, 500)
    try:
        with bulk_collector():
            assert gc.get_threshold() == (10**6, 50, 500)
    finally:
        gc.set_threshold(*before)


def test_cycles_made_inside_a_bulk_batch_are_still_collected():
    class Node:
        pass

    with bulk_collector():
        node = Node()
        node.self = node  # type: ignore[attr-defined]
        alive = weakref.ref(node)
        del node
        assert alive() is not None  # a cycle: reference counting alone keeps it
        # Enough new containers to pass the raised young threshold: a collection runs.
        keep = [[i] for i in range(3 * BULK_GC_THRESHOLDS[0])]
        assert alive() is None
        del keep


_POOL = """
import json, pyarrow as pa
from kindex_etl.memory import use_bulk_arrow_pool
try:
    pa.jemalloc_memory_pool()
    has = True
except NotImplementedError:
    has = False
before = pa.default_memory_pool().backend_name
chosen = use_bulk_arrow_pool()
arr = pa.array(list(range(1000))).cast(pa.float64())  # allocated after the switch
now = pa.default_memory_pool().backend_name
total = pa.compute.sum(arr).as_py()
print(json.dumps({"has": has, "before": before, "chosen": chosen, "now": now, "sum": total}))
"""


def _pool(**env: str) -> dict[str, object]:
    return _script(_POOL, drop=("ARROW_DEFAULT_MEMORY_POOL",), **env)


def test_bulk_work_runs_on_jemalloc_unless_a_pool_was_chosen():
    ours = _pool()
    assert ours["chosen"] == ours["now"] == ("jemalloc" if ours["has"] else ours["before"])
    assert ours["sum"] == sum(range(1000))
    chosen = _pool(ARROW_DEFAULT_MEMORY_POOL="system")
    assert chosen["before"] == chosen["chosen"] == chosen["now"] == "system"


# Arrow arrays made and dropped on jemalloc, with the decay `keep_arrow_pages` sets before
# pyarrow is imported (as the command's and the flows' entry points do).
_KEPT = """
import json, time
from kindex_etl.memory import keep_arrow_pages
took = keep_arrow_pages()
import pyarrow as pa, pyarrow.compute as pc
late = keep_arrow_pages()  # pyarrow is in: too late, nothing done
pa.set_memory_pool(pa.jemalloc_memory_pool())
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
base = pa.array(range(20_000), pa.int64())
before = rss()
made = [pc.add(base, i) for i in range(5000)]  # 5,000 x 156 KiB
del made
time.sleep(2.5)  # past Arrow's own decay (1 s)...
for _ in range(3000):  # ...and allocations, which is when jemalloc purges what decayed
    pc.add(base, 1)
print(json.dumps({"took": took, "late": late, "kept_mib": (rss() - before) / 2**20}))
"""


def _kept(**env: str) -> dict[str, Any]:
    drop = ("ARROW_DEFAULT_MEMORY_POOL", "JE_ARROW_MALLOC_CONF", "KINDEX_ARROW_DECAY_MS")
    return _script(_KEPT, drop=drop, **env)


def test_arrow_keeps_freed_pages_for_the_decay_the_settings_give():
    kept = _kept()
    assert kept["took"] is True and kept["late"] is False
    # Freed pages are still there for the next batch 2.5 s on (the default decay: 30 s)...
    assert float(kept["kept_mib"]) > 60
    # ...where Arrow's own 1 s has given them back: the setting is what reaches jemalloc.
    assert float(_kept(KINDEX_ARROW_DECAY_MS="1000")["kept_mib"]) < 30
    # An allocator configuration of the environment's own wins.
    conf = "dirty_decay_ms:1000,muzzy_decay_ms:1000"
    assert float(_kept(JE_ARROW_MALLOC_CONF=conf)["kept_mib"]) < 30


_WORKER_CONF = """
import json, os
from kindex_etl.memory import keep_arrow_pages
keep_arrow_pages()
from kindex_etl.workers import Workers
with Workers(2) as pool:
    worker = pool.submit(os.getenv, "JE_ARROW_MALLOC_CONF").result()
print(json.dumps({"parent": os.environ.get("JE_ARROW_MALLOC_CONF"), "worker": worker}))
"""


def test_analysis_workers_run_on_arrows_own_decay():
    # Kept pages bought the analysis nothing and cost each worker ~200 MiB.
    out = _script(_WORKER_CONF, drop=("JE_ARROW_MALLOC_CONF",), KINDEX_ARROW_DECAY_MS="30000")
    assert out == {
        "parent": "dirty_decay_ms:30000,muzzy_decay_ms:30000",
        "worker": "dirty_decay_ms:1000,muzzy_decay_ms:1000",
    }


# What a deployment's flow-run process does first: load the flow from its entrypoint.
_DEPLOYED = """
import json, os
from prefect.flows import load_flow_from_entrypoint
load_flow_from_entrypoint(os.environ["ENTRYPOINT"])
print(json.dumps({"conf": os.environ.get("JE_ARROW_MALLOC_CONF")}))
"""


def test_a_deployed_flow_sets_the_decay_before_pyarrow_is_in():
    entrypoint = f"{REPO / 'flows' / 'ingest.py'}:ingest_flow"  # deploy/prefect.yaml's
    env = {"KINDEX_ARROW_DECAY_MS": "30000", "ENTRYPOINT": entrypoint}
    out = _script(_DEPLOYED, drop=("JE_ARROW_MALLOC_CONF",), **env)
    assert out == {"conf": "dirty_decay_ms:30000,muzzy_decay_ms:30000"}
