"""The packaged catalog data (gpus.json, kernels.json): placements, names, coverage.

The kernel list was read off the liger-kernel 0.8.5 sdist (benchmark/scripts/benchmark_*.py);
SCRIPT_ROWS below records the rows those scripts write, so these tests need neither the sdist
nor network. The real upstream sample is the committed fixture (tests/helpers.SAMPLE_CSV).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.catalog import Catalog, load_catalog
from tests.helpers import SAMPLE_CSV

NAME = re.compile(r"^[a-z][a-z0-9]*$")
SAMPLE = SAMPLE_CSV

SEED_GPUS = [
    {
        "match": "NVIDIA H100",
        "vendor": "nvidia",
        "product": "NVIDIA H100",
        "architecture": "sm_90",
        "family": "Hopper",
        "segment": "datacenter",
    },
    {
        "match": "NVIDIA A100",
        "vendor": "nvidia",
        "product": "NVIDIA A100",
        "architecture": "sm_80",
        "family": "Ampere",
        "segment": "datacenter",
    },
    {
        "match": "NVIDIA B200",
        "vendor": "nvidia",
        "product": "NVIDIA B200",
        "architecture": "sm_100",
        "family": "Blackwell",
        "segment": "datacenter",
    },
    {
        "match": "NVIDIA GeForce RTX 4090",
        "vendor": "nvidia",
        "product": "NVIDIA GeForce RTX 4090",
        "architecture": "sm_89",
        "family": "Ada Lovelace",
        "segment": "consumer",
    },
    {
        "match": "NVIDIA GeForce RTX 3090",
        "vendor": "nvidia",
        "product": "NVIDIA GeForce RTX 3090",
        "architecture": "sm_86",
        "family": "Ampere",
        "segment": "consumer",
    },
]

# Rows the liger-kernel 0.8.5 benchmark scripts write: kernel -> [(x_name, config keys)], dtype
# left out. Helper-built scripts write a token-length row and a model-config row.
_LM = ("hidden_size", "vocab_size")
_DIST = ("bias", "weight_hard_loss", "weight_soft_loss", "ignore_index")
_PREF = ("bias", "beta", "ignore_index")
_MHC = ("tmax", "rms_eps", "pre_eps", "sinkhorn_eps", "post_mult")
_MHC_LM = ("HC", "layers", "heads", "vocab", "tmax", "intermediate_mult")
_MTA = ("C_in", "C_out", "K", "groups", "bias", "B")
_FSCE = ("selected_tokens", "selection_mode", "return_entropy", "temperature", "label_stride")
_ROPE = ("hidden_size", "num_attention_heads", "num_key_value_heads")
_TILED = ("activation_type", "num_shards", "bsz")
_MOE = ("sweep_dim", "T", "E", "H", "intermediate_dim", "K")
_MHC_ROWS = [
    ("T", ("B", "HC", "C", "sub_kernel", *_MHC)),
    ("model_config", ("model_configs", "B", "HC", "T", "sub_kernel", *_MHC)),
]


def _sweep(x: str, model_keys: tuple[str, ...] = (), extra: tuple[str, ...] = ()):
    """build_token_length_sweep's row and build_model_config_sweep's twin (0.8.5 helpers)."""
    return [
        (x, (*model_keys, *extra, "bsz", "seq_len")),
        ("model_config", ("bsz", "seq_len", *extra)),
    ]


SCRIPT_ROWS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "attn_res": _sweep("T", ("hidden_size",), ("N", "bsz", "eps")),
    "cpo_loss": _sweep("B", _LM, ("T",)),
    "cross_entropy": _sweep("BT", ("vocab_size",)),
    "cutedsl_fused_linear_cross_entropy_sm90": _sweep("BT", _LM),
    "cutile_fused_linear_cross_entropy_sm90": _sweep("BT", _LM),
    "distill_cosine_loss": _sweep("BT", _LM, _DIST),
    "distill_jsd_loss": _sweep("BT", _LM, _DIST),
    "dpo_loss": _sweep("B", _LM, ("T", *_PREF)),
    "dyt": _sweep("BT", ("hidden_size",), ("beta",)),
    "embedding": _sweep("BT", _LM, ("T",)),
    "fused_add_rms_norm": _sweep("BT", ("hidden_size", "intermediate_size"), ("eps",)),
    "fused_linear_cross_entropy": _sweep("BT", _LM, ("eps",)),
    "fused_linear_grpo_loss_sequence": _sweep("B", _LM, ("T", "importance_sampling_level")),
    "fused_linear_grpo_loss_token": _sweep("B", _LM, ("T", "importance_sampling_level")),
    "fused_linear_jsd": _sweep("BT", _LM),
    "fused_linear_kl_div": _sweep("BT", _LM),
    "fused_linear_selected_log_probs": [*_sweep("BT", _LM, _FSCE), ("BT", (*_LM, *_FSCE))],
    "fused_moe": [("T", _MOE), ("E", _MOE)],
    "fused_neighborhood_attention": [
        ("seq_len", ("hidden_size", "num_heads", "batch_size", "kernel_size", "dilation", "bias")),
        (
            "model_config",
            (
                "name",
                "batch_size",
                "hidden_size",
                "num_heads",
                "kernel_size",
                "dilation",
                "bias",
                "seq_len",
            ),
        ),
    ],
    "fused_scaled_cross_entropy_sm90": [*_sweep("BT", _LM, _FSCE), ("BT", (*_LM, *_FSCE))],
    "geglu": _sweep("T", ("hidden_size", "intermediate_size"), ("bsz", "hidden_act")),
    "group_norm": _sweep("BT", ("hidden_size",), ("channels_per_group", "eps", "H")),
    "grpo_loss_kernel_sequence": [("B", ("T", "V", "beta", "importance_sampling_level"))],
    "grpo_loss_kernel_token": [("B", ("T", "V", "beta", "importance_sampling_level"))],
    "jsd": _sweep("BT", ("vocab_size",)),
    "kl_div": _sweep("BT", ("vocab_size",), ("reduction",)),
    "kto_loss": _sweep("B", _LM, ("T", *_PREF)),
    "layer_norm": _sweep("T", ("hidden_size",), ("eps",)),
    "llama4_rope": _sweep("T", _ROPE),
    "megatron_cross_entropy": [("V", ("S", "B", "TP"))],
    "megatron_rms_norm": [("H", ("S", "B"))],
    "megatron_swiglu": [("ffn_local", ("S", "B"))],
    "mhc_coeffs": _MHC_ROWS,
    "mhc_llama_like_lm": [
        ("T", ("hidden_size", "B", *_MHC_LM)),
        ("model_config", ("model_configs", "B", "T", *_MHC_LM)),
    ],
    "mhc_post_res": _MHC_ROWS,
    "mhc_pre": _MHC_ROWS,
    "mlp": _sweep("T", ("hidden_size", "intermediate_size"), ("bsz", "hidden_act")),
    "modulated_rms_norm": [
        ("BT", ("hidden_size", "eps", "has_shift")),
        ("model_config", ("model_configs", "BT", "eps", "has_shift")),
    ],
    "multi_token_attention": [("L", _MTA), ("model_config", ("model_configs", *_MTA, "L"))],
    "orpo_loss": _sweep("B", _LM, ("T",)),
    "poly_norm": _sweep("T", ("hidden_size",), ("eps",)),
    "qwen2vl_mrope": _sweep("T", _ROPE),
    "relu_squared": _sweep("BT", ("hidden_size",)),
    "rms_norm": _sweep("T", ("hidden_size",), ("eps",)),
    "rope": _sweep("T", _ROPE),
    "simpo_loss": _sweep("B", _LM, ("T",)),
    "softmax": _sweep("BT", ("hidden_size",)),
    "sparse_multi_token_attention": [("L", _MTA), ("model_config", (*_MTA, "L"))],
    "sparsemax": _sweep("BT", ("hidden_size",), ("dim",)),
    "swiglu": _sweep("T", ("hidden_size", "intermediate_size"), ("bsz", "hidden_act")),
    "tiled_geglu": [
        ("T", ("hidden_size", "intermediate_size", "hidden_act", *_TILED)),
        ("model_config", ("model_configs", *_TILED, "seq_len")),
    ],
    "tiled_swiglu": [
        ("T", ("hidden_size", "intermediate_size", "hidden_act", *_TILED)),
        ("model_config", ("model_configs", *_TILED, "seq_len")),
    ],
    "tvd": _sweep("BT", ("vocab_size",), ("reduction",)),
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()  # the packaged files, whatever KINDEX_CATALOG_DIR says


def _raw_json(name: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        assert not dupes, f"{name}: duplicate keys {dupes}"
        return dict(pairs)

    text = resources.files("kindex_etl.catalog").joinpath(name).read_text(encoding="utf-8")
    return json.loads(text, object_pairs_hook=no_duplicates)


def _sample_rows() -> list[dict[str, str]]:
    with SAMPLE.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _resolve_row(catalog: Catalog, kernel: str, raw_keys: set[str]) -> dict[str, list[str]]:
    """meaning-name -> raw keys of one row; asserts every key resolves."""
    by_name: dict[str, list[str]] = {}
    for raw in sorted(raw_keys - {"dtype"}):
        name = catalog.parameter_name(kernel, raw)
        assert name is not None, f"{kernel}: raw parameter {raw!r} has no meaning-name"
        by_name.setdefault(name, []).append(raw)
    return by_name


# --- GPUs ---------------------------------------------------------------------------------------


def test_json_files_have_no_duplicate_keys() -> None:
    _raw_json("gpus.json")
    _raw_json("kernels.json")


def test_seed_gpu_entries_are_unchanged() -> None:
    entries = {e["match"]: e for e in _raw_json("gpus.json")["gpus"]}
    for seed in SEED_GPUS:
        assert entries[seed["match"]] == seed


def test_gpu_entries_are_well_formed() -> None:
    data = _raw_json("gpus.json")
    matches = [e["match"] for e in data["gpus"]]
    assert len(matches) == len(set(matches)), "a match string appears twice"
    arch = {"nvidia": re.compile(r"^sm_\d{2,3}$"), "amd": re.compile(r"^gfx[0-9a-f]{3,4}$")}
    display = {"nvidia": "NVIDIA ", "amd": "AMD "}
    for entry in data["gpus"]:
        assert entry["vendor"] in data["vendors"], entry
        assert arch[entry["vendor"]].match(entry["architecture"]), entry
        assert entry["segment"] in {"datacenter", "workstation", "consumer"}, entry
        assert entry["product"].startswith(display[entry["vendor"]]), entry
        assert entry["family"], entry
        assert entry["match"] == entry["match"].strip(), entry


def test_every_entry_places_its_own_name(catalog: Catalog) -> None:
    """No entry is shadowed by another: its own match string lands on it, with no form factor."""
    for entry in catalog.gpus:
        info = catalog.gpu(entry["match"])
        assert info is not None, entry
        assert (info.product, info.architecture, info.form_factor) == (
            entry["product"],
            entry["architecture"],
            None,
        ), entry


@pytest.mark.parametrize(
    ("gpu_name", "product", "architecture", "form_factor"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100", "sm_80", "SXM4-80GB"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100", "sm_80", "SXM4-40GB"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100", "sm_80", "80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100", "sm_80", "PCIE-40GB"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100", "sm_90", "80GB HBM3"),
        ("NVIDIA H100 PCIe", "NVIDIA H100", "sm_90", "PCIe"),
        ("NVIDIA H100 NVL", "NVIDIA H100", "sm_90", "NVL"),
        ("NVIDIA H200", "NVIDIA H200", "sm_90", None),
        ("NVIDIA H200 NVL", "NVIDIA H200", "sm_90", "NVL"),
        ("NVIDIA H20", "NVIDIA H20", "sm_90", None),
        ("NVIDIA H800 PCIe", "NVIDIA H800", "sm_90", "PCIe"),
        ("NVIDIA GH200 480GB", "NVIDIA GH200", "sm_90", "480GB"),
        ("NVIDIA B200", "NVIDIA B200", "sm_100", None),
        ("NVIDIA GB200", "NVIDIA GB200", "sm_100", None),
        ("NVIDIA B300 SXM6 AC", "NVIDIA B300", "sm_103", "SXM6 AC"),
        ("NVIDIA GB300", "NVIDIA GB300", "sm_103", None),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", "sm_89", None),
        ("NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 D", "sm_89", None),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 4090", "sm_89", "Laptop GPU"),
        ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090", "sm_86", None),
        ("NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 3090 Ti", "sm_86", None),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "NVIDIA GeForce RTX 4070 Ti SUPER", "sm_89", None),
        ("NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 5090", "sm_120", None),
        ("NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX 6000 Ada", "sm_89", None),
        ("NVIDIA RTX A6000", "NVIDIA RTX A6000", "sm_86", None),
        (
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            "NVIDIA RTX PRO 6000 Blackwell",
            "sm_120",
            "Workstation Edition",
        ),
        ("Quadro RTX 6000", "NVIDIA Quadro RTX 6000", "sm_75", None),
        ("NVIDIA A10", "NVIDIA A10", "sm_86", None),
        ("NVIDIA A10G", "NVIDIA A10G", "sm_86", None),
        ("NVIDIA L4", "NVIDIA L4", "sm_89", None),
        ("NVIDIA L40S", "NVIDIA L40S", "sm_89", None),
        ("Tesla V100-SXM2-32GB", "NVIDIA V100", "sm_70", "SXM2-32GB"),
        ("Tesla T4", "NVIDIA T4", "sm_75", None),
        ("AMD Instinct MI300X", "AMD Instinct MI300X", "gfx942", None),
        ("AMD Instinct MI300X VF", "AMD Instinct MI300X", "gfx942", "VF"),
        ("AMD Instinct MI250X/MI250", "AMD Instinct MI250X/MI250", "gfx90a", None),
        ("AMD Instinct MI100", "AMD Instinct MI100", "gfx908", None),
        ("AMD Instinct MI355X", "AMD Instinct MI355X", "gfx950", None),
        ("AMD Radeon RX 7900 XTX", "AMD Radeon RX 7900 XTX", "gfx1100", None),
    ],
)
def test_gpu_placement(
    catalog: Catalog, gpu_name: str, product: str, architecture: str, form_factor: str | None
) -> None:
    info = catalog.gpu(gpu_name)
    assert info is not None, gpu_name
    assert (info.product, info.architecture, info.form_factor) == (
        product,
        architecture,
        form_factor,
    )
    assert info.vendor == ("amd" if gpu_name.startswith("AMD ") else "nvidia")


def test_mi300x_is_amd_gfx942(catalog: Catalog) -> None:
    info = catalog.gpu("AMD Instinct MI300X")
    assert info is not None
    assert (info.vendor, info.architecture, info.family) == ("amd", "gfx942", "CDNA 3")
    assert catalog.short_gpu_name("AMD Instinct MI300X", info.vendor) == "Instinct MI300X"


@pytest.mark.parametrize(
    "gpu_name",
    [
        "NVIDIA H1000",  # a separator must follow the match: not an H100
        "NVIDIA H2000",
        "Intel Arc",
        "Intel(R) Arc(TM) A770 Graphics",
        "NVIDIA",
        "",
        "NVIDIA RTX 6000",  # Turing Quadro or Ada? ambiguous, so not guessed
        "NVIDIA A1000",
        "AMD Instinct MI3000X",
        "AMD Radeon Graphics",
    ],
)
def test_unknown_gpus_are_not_placed(catalog: Catalog, gpu_name: str) -> None:
    assert catalog.gpu(gpu_name) is None


def test_every_sample_gpu_is_placed(catalog: Catalog) -> None:
    names = {row["gpu_name"] for row in _sample_rows()}
    assert names
    unplaced = sorted(n for n in names if catalog.gpu(n) is None)
    assert not unplaced


def test_override_dir_teaches_a_new_gpu(catalog: Catalog, tmp_path: Path) -> None:
    gpus = _raw_json("gpus.json")
    gpus["gpus"].append(
        {
            "match": "NVIDIA H1000",
            "vendor": "nvidia",
            "product": "NVIDIA H1000",
            "architecture": "sm_90",
            "family": "Hopper",
            "segment": "datacenter",
        }
    )
    (tmp_path / "gpus.json").write_text(json.dumps(gpus), encoding="utf-8")
    taught = load_catalog(tmp_path)
    assert catalog.gpu("NVIDIA H1000 80GB") is None
    info = taught.gpu("NVIDIA H1000 80GB")
    assert info is not None and info.form_factor == "80GB"
    assert taught.gpu("NVIDIA H100 80GB HBM3") == catalog.gpu("NVIDIA H100 80GB HBM3")
    assert taught.kernels == catalog.kernels  # kernels.json not overridden: the packaged one


def test_override_dir_can_replace_kernels(tmp_path: Path) -> None:
    src = resources.files("kindex_etl.catalog").joinpath("kernels.json")
    shutil.copyfile(str(src), tmp_path / "kernels.json")
    data = json.loads((tmp_path / "kernels.json").read_text(encoding="utf-8"))
    data["kernels"]["brand_new_op"] = {
        "title": "Brand new op",
        "default_dtype": "fp16",
        "parameters": {"Q": "queries"},
    }
    (tmp_path / "kernels.json").write_text(json.dumps(data), encoding="utf-8")
    taught = load_catalog(tmp_path)
    info = taught.kernel("brand_new_op")
    assert info is not None and info.default_dtype == "fp16" and info.script is None
    assert taught.parameter_name("brand_new_op", "Q") == "queries"


# --- kernels ------------------------------------------------------------------------------------


def test_megatron_rms_norm_entry_is_exactly_the_seeds(catalog: Catalog) -> None:
    raw = _raw_json("kernels.json")["kernels"]["megatron_rms_norm"]
    assert raw == {
        "title": "RMSNorm, Megatron layout",
        "script": "benchmark_megatron_rms_norm.py",
        "default_dtype": "bf16",
        "parameters": {"H": "hidden", "S": "seq", "B": "batch"},
        "baseline": ["torch"],
    }
    # The seed row (x H=2048, config {"S": 4096, "B": 1}, no dtype) gives the seed's slug.
    values = {"H": 2048, "S": 4096, "B": 1}
    words = sorted(
        f"{catalog.parameter_name('megatron_rms_norm', raw_key)}{value}"
        for raw_key, value in values.items()
    )
    info = catalog.kernel("megatron_rms_norm")
    assert info is not None
    assert "-".join([*words, info.default_dtype or ""]) == "batch1-hidden2048-seq4096-bf16"


def test_rms_norm_keeps_its_seed_mappings(catalog: Catalog) -> None:
    info = catalog.kernel("rms_norm")
    assert info is not None
    assert (info.title, info.default_dtype, info.script) == (
        "RMSNorm",
        "bf16",
        "benchmark_rms_norm.py",
    )
    assert info.parameters["H"] == "hidden" and info.parameters["M"] == "rows"


def test_meaning_names_match_the_slug_grammar(catalog: Catalog) -> None:
    for raw, name in catalog.parameters.items():
        assert NAME.match(name), (raw, name)
    for kernel, info in catalog.kernels.items():
        for raw, name in info.parameters.items():
            assert NAME.match(name), (kernel, raw, name)


def test_no_kernel_maps_two_raw_keys_to_one_name(catalog: Catalog) -> None:
    for kernel, info in catalog.kernels.items():
        names = list(info.parameters.values())
        dupes = sorted({n for n in names if names.count(n) > 1})
        assert not dupes, f"{kernel}: {dupes}"


def test_dtype_is_never_a_parameter(catalog: Catalog) -> None:
    assert "dtype" not in catalog.parameters
    for kernel, info in catalog.kernels.items():
        assert "dtype" not in info.parameters, kernel


def test_default_dtypes_are_short_names(catalog: Catalog) -> None:
    short = set(catalog.dtypes.values())
    assert {"bf16", "fp16", "fp32"} <= short
    for name in short:
        assert NAME.match(name), name
    for kernel, info in catalog.kernels.items():
        assert info.default_dtype is None or info.default_dtype in short, kernel
        assert info.title and info.title == info.title.strip(), kernel
        assert info.script is None or re.match(r"^benchmark_[a-z0-9_]+\.py$", info.script), kernel
    assert catalog.dtype("torch.bfloat16") == "bf16"
    assert catalog.dtype("torch.float32") == "fp32"
    # kernels whose scripts build fp32 tensors and write no dtype
    for kernel in ("cross_entropy", "jsd", "kl_div", "tvd"):
        assert catalog.kernels[kernel].default_dtype == "fp32", kernel


def test_every_0_8_5_script_row_resolves_without_clashes(catalog: Catalog) -> None:
    for kernel, rows in SCRIPT_ROWS.items():
        info = catalog.kernel(kernel)
        assert info is not None, f"no catalog entry for {kernel}"
        assert info.script is not None, kernel
        for x_name, keys in rows:
            by_name = _resolve_row(catalog, kernel, {x_name, *keys})
            clashes = {n: raws for n, raws in by_name.items() if len(raws) > 1}
            assert not clashes, f"{kernel} x={x_name}: {clashes}"


def test_specific_parameter_meanings(catalog: Catalog) -> None:
    name = catalog.parameter_name
    assert name("fused_moe", "T") == "tokens"  # tokens, not a sequence length, in the MoE bench
    assert name("fused_moe", "K") == "topk"
    assert name("multi_token_attention", "K") == "kernelsize"
    assert name("rms_norm", "seq_len") == "sweepseq"  # beside the swept T
    assert name("cpo_loss", "bsz") == "sweepbatch"  # beside the swept B
    assert name("jsd", "seq_len") == "seq"
    assert name("llama4_rope", "num_q_heads") == "heads"
    assert name("rope", "num_key_value_heads") == "kvheads"
    assert name("megatron_swiglu", "ffn_local") == "intermediate"
    assert name("some_future_kernel", "hidden_size") == "hidden"  # global map
    assert name("some_future_kernel", "Z") is None


def test_every_sample_kernel_and_parameter_is_known(catalog: Catalog) -> None:
    rows = _sample_rows()
    assert rows
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    for row in rows:
        config = row["extra_benchmark_config_str"]
        keys = tuple(sorted(json.loads(config))) if config.strip() else ()
        seen.add((row["kernel_name"], row["x_name"], keys))
        if config.strip() and "dtype" in json.loads(config):
            assert catalog.dtype(str(json.loads(config)["dtype"])) is not None, row
    for kernel, x_name, keys in sorted(seen):
        assert catalog.kernel(kernel) is not None, f"no catalog entry for {kernel}"
        by_name = _resolve_row(catalog, kernel, {x_name, *keys})
        clashes = {n: raws for n, raws in by_name.items() if len(raws) > 1}
        assert not clashes, f"{kernel} x={x_name}: {clashes}"


def test_baselines_are_providers_upstream_measured(catalog: Catalog) -> None:
    """Every baseline names a provider; in the sample, each kernel measured with liger and a
    reference implementation finds its baseline among that kernel's providers."""
    for name, info in catalog.kernels.items():
        assert all(b and b != info.liger_provider for b in info.baseline), name
    providers: dict[str, set[str]] = {}
    with SAMPLE.open(newline="") as fh:
        for row in csv.DictReader(fh):
            providers.setdefault(row["kernel_name"], set()).add(row["kernel_provider"])
    checked = 0
    for kernel, seen in providers.items():
        info = catalog.kernel(kernel)
        assert info is not None and info.baseline, kernel
        assert info.liger_provider in seen, kernel
        assert seen & set(info.baseline), (kernel, seen, info.baseline)
        checked += 1
    assert checked >= 30
