"""Workload and protocol identity from the catalog's variant rules.

Rows come from three places: the upstream sample (the committed fixture), real rows of
the liger-kernel 0.8.5 sdist (tests/fixtures/sdist-rows/), and rows written here in the shape
each release's script writes them (the script and lines are named beside each).
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kindex_etl.catalog import default_catalog
from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from kindex_etl.normalize.columnar import ColumnarNormalizer
from kindex_etl.normalize.descriptors import (
    UNKNOWN_KERNEL_LABEL,
    VERSION_LABEL,
    Descriptor,
    DescriptorKey,
    Rejected,
    Resolver,
    name_head,
    name_prefix,
    name_tail,
)
from kindex_etl.normalize.reference import descriptor_key, normalize_row
from kindex_etl.normalize.slugs import slug
from tests.helpers import FIXTURES, SAMPLE_CSV, row, seed_row

SDIST_ROWS = FIXTURES / "sdist-rows" / "all_benchmark_data.csv"


def upstream(
    kernel: str,
    x_name: str,
    x_value: int | str,
    config: dict[str, Any],
    *,
    version: str,
    mode: str = "full",
    provider: str = "liger",
    metric: str = "speed",
    timestamp: str = "2026-08-01 12:00:00",
) -> dict[str, str]:
    """A row as utils.update_benchmark_data_csv writes it (json.dumps of the config)."""
    return row(
        kernel_name=kernel,
        kernel_provider=provider,
        kernel_operation_mode=mode,
        metric_name=metric,
        metric_unit="ms" if metric == "speed" else "MB",
        x_name=x_name,
        x_label=x_name,
        x_value=str(x_value),
        extra_benchmark_config_str=json.dumps(config),
        liger_version=version,
        timestamp=timestamp,
    )


def resolve(r: dict[str, str]) -> Descriptor:
    return Resolver(default_catalog()).resolve(descriptor_key(r))


def parameters(d: Descriptor) -> dict[str, Any]:
    spec: dict[str, Any] = d.workload["spec"]
    return dict(spec["parameters"])


def _csv(path: Any) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


BF16 = "torch.bfloat16"

# v0.5.10/scripts/benchmark_dyt.py:118-125: beta in the kernel name and in the config.
DYT_0_5_10 = [
    upstream(
        f"dyt_beta={beta}", "hidden_size", 4096, {"BT": 4096, "dtype": BF16, "beta": beta},
        version="0.5.10",
    )
    for beta in (True, False)
]  # fmt: skip
# main-2026-08-21/scripts/benchmark_dyt.py:78-91 through the sweep helper
# (benchmark_model_configs.py:600-632): bsz and seq_len are the sweep's bounds.
DYT_MAIN = upstream(
    "dyt", "BT", 4096,
    {"hidden_size": 4096, "dtype": BF16, "beta": True, "bsz": 2, "seq_len": 8192},
    version="0.8.5",
)  # fmt: skip


def test_dyt_beta_rows_become_dyt_runs_with_beta_in_the_workload() -> None:
    true, false = (resolve(r) for r in DYT_0_5_10)
    for d, beta in ((true, True), (false, False)):
        assert d.kernel == "dyt" and d.key.kernel == f"dyt_beta={beta}"
        assert d.workload["spec"]["kernel"] == "dyt"
        assert d.implementation["spec"]["kernel"] == "dyt"
        assert parameters(d) == {"beta": beta, "hidden": 4096, "tokens": 4096}
        assert d.series_id.startswith("dyt/full/liger/")
        assert d.benchmark == "dyt/full"
        assert d.variant == "dyt/hidden_size-beta-in-name"
        assert UNKNOWN_KERNEL_LABEL not in d.labels
    assert true.workload_digest != false.workload_digest
    assert true.workload_slug == "betatrue-hidden4096-tokens4096-bf16"


def test_dyt_beta_rows_go_through_the_columnar_normalizer_and_keep_the_raw_name() -> None:
    normalizer = ColumnarNormalizer(default_catalog())
    out = normalizer.normalize(
        _batch(DYT_0_5_10), source_key="k", source_etag="e", lines=np.array([2, 3])
    )
    assert out.quarantine.num_rows == 0
    runs = out.runs.to_pylist()
    assert [r["kernel"] for r in runs] == ["dyt", "dyt"]
    assert [r["source_kernel"] for r in runs] == ["dyt_beta=True", "dyt_beta=False"]
    assert {r["catalog_version"] for r in runs} == {default_catalog().version}
    assert {r["workload_variant"] for r in runs} == {"dyt/hidden_size-beta-in-name"}


def test_two_dyt_script_versions_of_one_computation_share_a_workload() -> None:
    old, new = resolve(DYT_0_5_10[0]), resolve(DYT_MAIN)
    assert new.variant == "dyt/BT-sweep-helper"
    assert parameters(new) == {"beta": True, "hidden": 4096, "tokens": 4096}
    assert old.workload_digest == new.workload_digest
    assert old.workload_slug == new.workload_slug
    # ... while who computed it still differs by release
    assert old.implementation_digest != new.implementation_digest


def test_a_name_embedded_parameter_that_contradicts_the_config_is_held_back() -> None:
    r = upstream(
        "dyt_beta=True", "hidden_size", 4096, {"BT": 4096, "dtype": BF16, "beta": False},
        version="0.5.10",
    )  # fmt: skip
    with pytest.raises(Rejected) as caught:
        resolve(r)
    assert caught.value.reason == "bad_config"


@pytest.mark.parametrize("kernel", ["dyt_beta=maybe", "a/b", "x y", "=dyt"])
def test_a_name_that_forms_no_identifier_is_still_held_back(kernel: str) -> None:
    with pytest.raises(Rejected) as caught:
        resolve(row(kernel_name=kernel))
    assert caught.value.reason == "bad_identifier"


def test_a_bt_sweep_run_carries_its_token_count_not_the_bound() -> None:
    # main-2026-08-21/scripts/benchmark_fused_linear_cross_entropy.py:52-66,98-110
    r = upstream(
        "fused_linear_cross_entropy", "BT", 1024,
        {"hidden_size": 4096, "vocab_size": 128256, "dtype": BF16, "eps": 1e-6,
         "bsz": 1, "seq_len": 8192},
        version="0.8.2",
    )  # fmt: skip
    d = resolve(r)
    assert parameters(d) == {"hidden": 4096, "tokens": 1024, "vocab": 128256}
    assert d.workload_slug == "hidden4096-tokens1024-vocab128256-bf16"
    assert "8192" not in d.series_id


def test_real_jsd_bt_rows_from_the_sdist_carry_tokens() -> None:
    jsd = [r for r in _csv(SDIST_ROWS) if r["kernel_name"] == "jsd"]
    assert len(jsd) == 2 and all(json.loads(r["extra_benchmark_config_str"])["seq_len"] == 8192
                                 for r in jsd)  # fmt: skip
    for r in jsd:
        d = resolve(r)
        assert parameters(d) == {"tokens": 1024, "vocab": 128256}
        assert d.workload_slug == "tokens1024-vocab128256-fp32"
    liger, torch = (resolve(r) for r in jsd)
    assert liger.workload_digest == torch.workload_digest  # only the provider differs


def test_fused_linear_cross_entropy_of_two_script_versions_shares_a_workload() -> None:
    # v0.7.0/scripts/benchmark_fused_linear_cross_entropy.py:161-168 ("mode" is read by nobody)
    old = upstream(
        "fused_linear_cross_entropy", "BT", 4096,
        {"H": 4096, "V": 128256, "mode": "forward", "dtype": BF16},
        version="0.7.0", mode="backward",
    )  # fmt: skip
    new = upstream(
        "fused_linear_cross_entropy", "BT", 4096,
        {"hidden_size": 4096, "vocab_size": 128256, "dtype": BF16, "eps": 1e-6,
         "bsz": 1, "seq_len": 8192},
        version="0.8.2", mode="backward",
    )  # fmt: skip
    a, b = resolve(old), resolve(new)
    assert "mode" not in a.workload_slug and "forward" not in a.series_id
    assert a.workload_digest == b.workload_digest
    assert a.series_id == b.series_id


def test_rms_norm_rows_of_two_script_versions_share_a_workload() -> None:
    # v0.7.0/scripts/benchmark_rms_norm.py:139-146 sweeps H over M rows; main sweeps T rows
    # of a (T, hidden) tensor (main-2026-08-21/scripts/benchmark_rms_norm.py:36-56).
    old = upstream("rms_norm", "H", 4096, {"M": 2048, "dtype": BF16, "eps": 1e-6},
                   version="0.7.0")  # fmt: skip
    new = upstream(
        "rms_norm", "T", 2048,
        {"hidden_size": 4096, "dtype": BF16, "eps": 1e-6, "bsz": 1, "seq_len": 16384},
        version="0.8.2",
    )  # fmt: skip
    a, b = resolve(old), resolve(new)
    assert parameters(a) == parameters(b) == {"eps": 1e-6, "hidden": 4096, "rows": 2048}
    assert a.workload_digest == b.workload_digest


def test_rope_hidden_and_sequence_sweeps_meet_at_one_workload() -> None:
    rows = _csv(SAMPLE_CSV)

    def pick(x_name: str, x_value: str) -> dict[str, str]:
        return next(
            r for r in rows
            if (r["kernel_name"], r["kernel_provider"], r["kernel_operation_mode"]) ==
            ("rope", "liger", "forward") and r["metric_name"] == "speed"
            and (r["x_name"], r["x_value"]) == (x_name, x_value)
        )  # fmt: skip

    # H sweep at seq_len 2048 (v0.7.0/scripts/benchmark_rope.py:22-34: seq_len is read as is)
    by_hidden, by_seq = resolve(pick("H", "8192")), resolve(pick("T", "2048"))
    assert json.loads(by_hidden.key.config)["seq_len"] == 2048
    assert (
        by_hidden.workload_slug
        == by_seq.workload_slug
        == ("heads32-hidden8192-kvheads8-seq2048-bf16")
    )
    assert by_hidden.workload_digest == by_seq.workload_digest


def test_dead_mode_key_leaves_the_descriptor_of_sample_loss_rows() -> None:
    loss = [
        r for r in _csv(SAMPLE_CSV)
        if '"mode": "forward"' in r["extra_benchmark_config_str"]
    ]  # fmt: skip
    assert {r["kernel_operation_mode"] for r in loss} == {"forward", "full"}
    for r in loss:
        d = resolve(r)
        assert d.variant is not None, r["kernel_name"]
        assert "mode" not in parameters(d) and "modeforward" not in d.workload_slug
        assert json.loads(d.key.config)["mode"] == "forward"  # the raw text is kept


def test_every_sample_and_sdist_row_matches_a_variant_or_says_it_does_not() -> None:
    rows = _csv(SDIST_ROWS) + _csv(SAMPLE_CSV)
    unmatched = set()
    for r in rows:
        d = resolve(r)
        if d.variant is None:
            assert d.labels[UNKNOWN_KERNEL_LABEL] == "unknown-variant"
            unmatched.add(d.kernel)
        else:
            assert UNKNOWN_KERNEL_LABEL not in d.labels
    # the 0.8.4 one-off benchmark, whose script no tag folder holds
    assert unmatched == {"fused_linear_selected_log_probs"}


def test_an_unknown_variant_keeps_every_key_and_is_flagged() -> None:
    d = resolve(row(extra_benchmark_config_str='{"S": 4096, "B": 1, "bsz": 9}'))
    assert d.variant is None and d.labels[UNKNOWN_KERNEL_LABEL] == "unknown-variant"
    # two raw names with one meaning: the second keeps its raw name, as before variants
    assert parameters(d) == {"batch": 1, "bszraw": 9, "hidden": 2048, "seq": 4096}
    unknown = resolve(row(kernel_name="never_seen"))
    assert unknown.labels[UNKNOWN_KERNEL_LABEL] == "unknown-kernel"
    # M is the row count wherever a script uses it: the global map names it for new kernels
    new = resolve(
        row(kernel_name="future_norm", x_name="N", extra_benchmark_config_str='{"M": 64}')
    )
    assert parameters(new) == {"rows": 64, "n": 2048}


def test_protocol_variants_are_used_for_the_named_kernels() -> None:
    rows = {(r["kernel_name"], r["metric_name"], r["kernel_operation_mode"]): r
            for r in _csv(SDIST_ROWS)}  # fmt: skip
    family_full = resolve(seed_row())
    assert family_full.protocol["metadata"]["name"] == "liger-bench-do-bench-full"

    rms_backward = resolve(rows[("megatron_rms_norm", "speed", "backward")])
    assert rms_backward.protocol["metadata"]["name"] == "liger-bench-do-bench-backward-with-forward"
    assert (
        "forward pass plus the backward" in rms_backward.protocol["spec"]["comparability"]["notes"]
    )
    swiglu_backward = resolve(rows[("megatron_swiglu", "speed", "backward")])
    assert swiglu_backward.protocol_digest == rms_backward.protocol_digest

    ce = resolve(rows[("megatron_cross_entropy", "speed", "backward")])
    notes = ce.protocol["spec"]["comparability"]["notes"]
    assert "CUDA events" in notes and "not triton.testing.do_bench" in notes
    assert "forward pass plus the backward" in notes
    ce_forward = resolve(row(**{**rows[("megatron_cross_entropy", "speed", "backward")],
                                "kernel_operation_mode": "forward"}))  # fmt: skip
    assert ce_forward.protocol["metadata"]["name"] == "liger-bench-cuda-event-loop-forward"

    forward, backward = (
        resolve(rows[("group_norm", "memory", m)]) for m in ("forward", "backward")
    )
    assert (
        forward.protocol["metadata"]["name"] == "liger-bench-peak-memory-forward-backward-any-pass"
    )
    assert (
        "forward pass plus the backward pass, whatever"
        in (forward.protocol["spec"]["comparability"]["notes"])
    )
    # one measurement whatever the row's pass says: one protocol, not the family's full one
    assert backward.protocol == forward.protocol
    full = resolve(row(**{**rows[("group_norm", "memory", "forward")],
                          "kernel_operation_mode": "full"}))  # fmt: skip
    assert full.protocol["metadata"]["name"] == "liger-bench-peak-memory-full"
    assert full.protocol_digest != forward.protocol_digest
    # from 0.8.0 on, the script measures the pass it names: the family's protocol again
    fixed = resolve(row(**{**rows[("group_norm", "memory", "forward")], "liger_version": "0.8.0"}))
    assert fixed.protocol["metadata"]["name"] == "liger-bench-peak-memory-forward"


def test_suspicious_versions_are_labelled_not_dropped() -> None:
    seed = resolve(seed_row())  # megatron_rms_norm first shipped in 0.8.1, main reported 0.8.0
    assert VERSION_LABEL not in seed.labels
    early = upstream(
        "multi_token_attention", "L", 32,
        {"B": 2, "C_in": 4, "C_out": 4, "K": 3, "groups": 1, "bias": True, "dtype": BF16},
        version="0.1.1",
    )  # fmt: skip
    d = resolve(early)
    assert d.labels[VERSION_LABEL] == "predates-benchmark-0.6.0"
    assert d.labels["liger_version"] == "0.1.1"
    dyt = resolve(upstream("dyt", "BT", 1024, {"hidden_size": 4096, "dtype": BF16},
                           version="0.5.4"))  # fmt: skip
    assert dyt.labels[VERSION_LABEL] == "predates-benchmark-0.5.6"
    assert (
        VERSION_LABEL
        not in resolve(
            upstream("dyt", "BT", 1024, {"hidden_size": 4096, "dtype": BF16}, version="0.5.5")
        ).labels
    )


def _batch(rows: list[dict[str, str]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {c: pa.array([r[c] for r in rows], pa.string()) for c in UPSTREAM_COLUMNS}
    )


def test_columnar_runs_equal_the_reference_on_variant_rows() -> None:
    rows = [*DYT_0_5_10, DYT_MAIN, *_csv(SDIST_ROWS)]
    catalog = default_catalog()
    out = ColumnarNormalizer(catalog).normalize(
        _batch(rows), source_key="k", source_etag="e", lines=np.arange(2, len(rows) + 2)
    )
    lines = [json.loads(line) for line in out.json_lines.to_pylist()]
    assert lines == [normalize_row(catalog, r).run for r in rows]


def test_softmax_rows_of_two_script_versions_share_a_workload() -> None:
    # v0.7.0/scripts/benchmark_softmax.py:18-25 sweeps N columns over M rows; main sweeps BT
    # rows of a (BT, hidden) tensor (main-2026-08-21/scripts/benchmark_softmax.py:24-37).
    old = upstream("softmax", "N", 4096, {"M": 2048, "dtype": BF16}, version="0.7.0")
    new = upstream(
        "softmax", "BT", 2048,
        {"hidden_size": 4096, "dtype": BF16, "bsz": 4, "seq_len": 4096},
        version="0.8.2",
    )  # fmt: skip
    a, b = resolve(old), resolve(new)
    assert b.variant == "rows/BT-sweep-helper"
    assert parameters(a) == parameters(b) == {"hidden": 4096, "rows": 2048}
    assert a.workload_digest == b.workload_digest


_PART = st.text(alphabet=st.sampled_from("aZ09-_. +/:\u00e9\u03a3"), max_size=6)


@given(st.lists(_PART, min_size=1, max_size=6))
def test_name_prefix_is_the_slug_of_the_joined_parts(parts: list[str]) -> None:
    # The resolver slugs the shared parts once per (kernel, pass, provider, GPU), the workload
    # slug once per workload, and joins.
    *shared, last = parts
    head, tail = name_head(tuple(shared)), name_tail(last)
    assert name_prefix(tuple(shared), head, last, tail) == slug("-".join(("liger", *parts)))


def _outcome(resolver: Resolver, key: DescriptorKey) -> object:
    """What a key resolves to, with its parts as contents: a descriptor's `parts` are indices
    into its own resolver's lists (a warm resolver's differ from a fresh one's), and each
    part's `index` likewise; what they point at must not."""
    try:
        found = resolver.resolve(key)
    except Rejected as rejected:
        return (rejected.reason, rejected.detail)
    built = resolver.parts
    s, w, p, i = found.parts
    parts = (
        replace(built.shared[s], index=-1),
        replace(built.workloads[w], index=-1),
        built.protocols[p],
        built.implementations[i],
    )
    return replace(found, parts=(-1, -1, -1, -1)), parts


_FIELD = {
    "kernel": ["rms_norm", "", "dyt_beta=True", "no such kernel", "geglu"],
    "mode": ["forward", "", "full"],
    "provider": ["liger", "", "huggingface"],
    "metric": ["speed", "memory", ""],
    "unit": ["ms", "MB"],
    "x_name": ["H", ""],
    "x_value": ["1024", "", "2048"],
    "config": ['{"dtype": "torch.bfloat16"}', "", "{", '{"M": 4}'],
    "gpu_name": ["NVIDIA H100 80GB HBM3", "", "a GPU no catalog places"],
    "liger_version": ["0.5.0", "", "v0.8", "0.8.0"],
}


_FOUND = {
    "kernel": "rms_norm", "mode": "forward", "provider": "liger", "metric": "speed", "unit": "ms",
    "x_name": "H", "x_value": "1024", "config": '{"dtype": "torch.bfloat16"}',
    "gpu_name": "NVIDIA H100 80GB HBM3",
}  # fmt: skip


@given(st.lists(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in _FIELD.items()})))
# Two keys that resolve, the second into parts of its own (hypothesis found it in CI: its
# indices, not its contents, differed from a fresh resolver's).
@example([{**_FOUND, "liger_version": "0.5.0"}, {**_FOUND, "liger_version": "0.8.0"}])
def test_a_warm_resolver_answers_every_key_as_a_fresh_one(keys: list[dict[str, str]]) -> None:
    # Its caches are shared by keys that differ in x and config: which check fails first, and
    # every descriptor field, must not depend on the keys resolved before.
    warm = Resolver(default_catalog())
    for fields in keys:
        key = DescriptorKey(**fields, x_label="x", software="")
        assert _outcome(warm, key) == _outcome(Resolver(default_catalog()), key)


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"x_name": "", "gpu_name": "a GPU no catalog places"}, "x_name is empty"),
        ({"x_value": "", "liger_version": ""}, "x_value is empty"),
        ({"x_value": "", "kernel_provider": "not/plain"}, "x_value is empty"),
        ({"x_name": "", "metric_name": ""}, "metric_name is empty"),
        ({"x_value": "", "kernel_name": ""}, "kernel_name is empty"),
        ({"gpu_name": "", "liger_version": ""}, "gpu_name is empty"),
    ],
)
def test_the_first_failed_check_names_the_field(fields: dict[str, str], detail: str) -> None:
    # Checked in column order: kernel, provider, metric, x_name, x_value, GPU, version.
    key = descriptor_key(seed_row() | fields)
    resolver = Resolver(default_catalog())
    resolver.resolve(descriptor_key(seed_row()))  # a warm cache for the key's shared part
    with pytest.raises(Rejected) as raised:
        resolver.resolve(key)
    assert raised.value.detail == detail


# The loss scripts up to v0.7.0 wrote `"mode": "forward"` into every config and read
# `input.kernel_operation_mode` instead (v0.7.0/scripts/benchmark_dpo_loss.py:26-32,75-83,
# 145-158). The catalog command derives the rule from upstream's scripts (variants.json).
DPO_CONFIG = {
    "T": 512, "H": 1024, "V": 128256, "dtype": BF16, "bias": True, "beta": 0.1,
    "ignore_index": 42,
}  # fmt: skip


@pytest.mark.parametrize("version", ["0.5.10", "0.6.4", "0.7.0"])
def test_dpo_loss_dead_mode_key_does_not_split_its_workload(version: str) -> None:
    with_mode = resolve(
        upstream("dpo_loss", "B", 8, {**DPO_CONFIG, "mode": "forward"}, version=version)
    )
    without = resolve(upstream("dpo_loss", "B", 8, DPO_CONFIG, version=version))
    assert with_mode.variant is not None and with_mode.variant.startswith("derived:dpo_loss/B")
    assert "mode" not in parameters(with_mode)
    assert with_mode.workload_digest == without.workload_digest
    assert with_mode.workload_slug == without.workload_slug
    assert json.loads(with_mode.key.config)["mode"] == "forward"  # the raw text is kept


def test_a_derived_dead_key_rule_holds_only_for_the_releases_that_never_read_it() -> None:
    # No script after v0.7.0 writes the key: a row that says otherwise keeps it, visibly.
    later = resolve(
        upstream("dpo_loss", "B", 8, {**DPO_CONFIG, "mode": "forward"}, version="0.8.1")
    )
    assert later.variant is None and parameters(later)["mode"] == "forward"


def test_derived_variants_come_after_the_hand_rules() -> None:
    ids = [v.id for v in default_catalog().variants]
    derived = [i for i in ids if i.startswith("derived:")]
    assert derived and ids[-len(derived) :] == derived
    # A hand rule with cited lines still names the rows both match.
    kto = resolve(upstream("kto_loss", "B", 8, {**DPO_CONFIG, "mode": "forward"}, version="0.6.4"))
    assert kto.variant == "kto_loss/B-mode"
