"""Where everything lives in a warehouse. Consumers rely on these paths: change them never.

benchmark_runs/release=<liger_version>/part-<batch>-<n>.parquet   one row per run; every
    file also has a liger_version column, so one read alone (or by list) is complete (files
    that delta-rs's compaction wrote are named by it: part-<n>-<uuid>-c000.zstd.parquet)
benchmark_protocols/part-<batch>.parquet                    one row per protocol digest
execution_environments/part-<batch>.parquet                 one row per environment digest
workloads/part-<batch>.parquet, implementations/part-<batch>.parquet   descriptors
documents/<table>/part-<batch>.jsonl.zst                    the same, as documents
quarantine/rows/part-<batch>.parquet                        rows and files set aside
regressions/part-<batch>.parquet                            detected changes (kindex_etl.analysis)
triage/part-<batch>.parquet                                 verdicts on changes (kindex-etl triage)
reports/index.html, reports/<kernel>.html, reports/plotly-*.min.js   the report (rewritten)
_kindex/log/<seq>.json                                      commit records (the truth)
_kindex/snapshot.json                                       every published file, by table
_kindex/checkpoints/<seq>.json                              the log folded up to <seq>
_kindex/checkpoints/<seq>.runs.parquet                      every run's key at <seq> (writers'
    start-up: see Warehouse.run_index)
_kindex/last_checkpoint.json                                the newest checkpoint's seq (a hint)
_kindex/staging/<batch>/...                                 data not yet committed
_kindex/reruns/<version>.json                               GPU re-run requests
_kindex/analysed.json                                       the commit the analyses looked
    through (a hint: kindex_etl.analysis.analysed)
_kindex/announced.json                                      the commit through which every
    alert was announced (kindex_etl.analysis.announce)
"""

from __future__ import annotations

from urllib.parse import unquote

RUNS = "benchmark_runs"
PROTOCOLS = "benchmark_protocols"
ENVIRONMENTS = "execution_environments"
WORKLOADS = "workloads"
IMPLEMENTATIONS = "implementations"
QUARANTINE = "quarantine/rows"
REGRESSIONS = "regressions"
TRIAGE = "triage"  # people's verdicts on changes (kindex_etl.report.triage)
TABLES = (
    RUNS,
    PROTOCOLS,
    ENVIRONMENTS,
    WORKLOADS,
    IMPLEMENTATIONS,
    QUARANTINE,
    REGRESSIONS,
    TRIAGE,
)

# Everything that is not table data lives under CONTROL, but the report: rewritten in place by
# each regressions run, never committed, it is pages for people, not a table.
REPORTS = "reports/"
CONTROL = "_kindex/"
LOG = CONTROL + "log/"
SNAPSHOT = CONTROL + "snapshot.json"
STAGING = CONTROL + "staging/"
CHECKPOINTS = CONTROL + "checkpoints/"
LAST_CHECKPOINT = CONTROL + "last_checkpoint.json"
RERUNS = CONTROL + "reruns/"


def runs_key(batch: str, version: str, part: int) -> str:
    return f"{RUNS}/release={version}/part-{batch}-{part:05d}.parquet"


def table_key(table: str, batch: str) -> str:
    return f"{table}/part-{batch}.parquet"


def documents_key(table: str, batch: str) -> str:
    return f"documents/{table}/part-{batch}.jsonl.zst"


def part_key(table: str, batch: str, part: int) -> str:
    """A numbered part of a batch's documents of one kind (compaction writes several)."""
    return f"{table}/part-{batch}-{part:05d}.jsonl.zst"


def partition_of(key: str) -> str:
    """The hive partition folder of a data key ("release=0.8.0"), or "" for unpartitioned."""
    parent = key[len(table_of(key)) + 1 :].rpartition("/")[0]
    return parent


def release_of(key: str) -> str | None:
    """A runs file's release: its `release=` folder, unescaped (delta-rs's compaction writes
    release `0.8.0+cu121` into a folder `release=0.8.0%2Bcu121`); None outside one."""
    name, _, value = partition_of(key).partition("=")
    return unquote(value) if name == "release" else None


def checkpoint_key(seq: int) -> str:
    return f"{CHECKPOINTS}{seq:012d}.json"


def run_index_key(seq: int) -> str:
    return f"{CHECKPOINTS}{seq:012d}.runs.parquet"


def log_key(seq: int) -> str:
    return f"{LOG}{seq:012d}.json"


def staging_key(batch: str, key: str) -> str:
    return f"{STAGING}{batch}/{key}"


def table_of(key: str) -> str:
    if key.startswith("documents/"):
        return "documents/" + key.split("/")[1]
    for table in TABLES:
        if key.startswith(table + "/"):
            return table
    raise ValueError(f"not a warehouse data key: {key}")
