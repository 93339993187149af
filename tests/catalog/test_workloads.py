"""workloads.json: variant rules, name-embedded parameters, protocol variants, first releases.

The evidence checks read ../shared/upstream-scripts (the benchmark scripts of every release tag)
and are skipped where that folder is not beside the checkout.
"""

from __future__ import annotations

import json
import re
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from kindex_etl.catalog import Catalog, load_catalog
from tests.helpers import SHARED

NAME = re.compile(r"^[a-z][a-z0-9]*$")
SCRIPTS = SHARED / "upstream-scripts"
EVIDENCE = re.compile(r"^(?P<path>[a-z0-9.-]+/scripts/[a-z0-9_]+\.py)(?::(?P<lines>[0-9,-]+))?$")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _workloads() -> dict[str, Any]:
    text = resources.files("kindex_etl.catalog").joinpath("workloads.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _rules() -> list[dict[str, Any]]:
    data = _workloads()
    return [*data["variants"], *data["kernelNames"], *data["protocols"]]


def _tags() -> list[str]:
    tags = [p.name for p in SCRIPTS.iterdir() if p.name.startswith("v")]
    return sorted(tags, key=lambda t: Version(t[1:]))


def test_every_variant_names_its_kept_keys_once(catalog: Catalog) -> None:
    for rule in catalog.variants:
        assert rule.bounds <= rule.keys and rule.dead <= rule.keys, rule.id
        assert set(rule.parameters) <= rule.keys | {rule.x_name}, rule.id
        kept = (rule.keys | {rule.x_name}) - rule.bounds - rule.dead - {"dtype"}
        names: dict[str, str] = {}
        for kernel in rule.kernels:
            assert catalog.kernel(kernel) is not None, f"{rule.id}: {kernel} not in kernels.json"
            for raw in sorted(kept):
                name = rule.parameters.get(raw) or catalog.parameter_name(kernel, raw)
                assert name is not None and NAME.match(name), f"{rule.id}: {raw!r} -> {name!r}"
                assert names.setdefault(f"{kernel}:{name}", raw) == raw, f"{rule.id}: {name}"


def test_variant_ids_are_unique_and_no_two_variants_match_one_row(catalog: Catalog) -> None:
    ids = [rule.id for rule in catalog.variants]
    assert len(ids) == len(set(ids))
    for i, a in enumerate(catalog.variants):
        for b in catalog.variants[i + 1 :]:
            same = a.kernels & b.kernels and a.x_name == b.x_name and a.keys == b.keys
            # Rows that two rules would both claim must be told apart by a version range.
            assert not same or (a.versions is not None or b.versions is not None), (a.id, b.id)


def test_every_rule_cites_script_lines() -> None:
    for rule in _rules():
        assert rule["evidence"], rule["id"]
        for ref in rule["evidence"]:
            assert EVIDENCE.match(ref), f"{rule['id']}: {ref!r}"


def test_evidence_points_at_real_script_lines() -> None:
    if not SCRIPTS.is_dir():
        pytest.skip("../shared/upstream-scripts is not beside this checkout")
    for rule in _rules():
        for ref in rule["evidence"]:
            found = EVIDENCE.match(ref)
            assert found
            path = SCRIPTS / found["path"]
            assert path.is_file(), f"{rule['id']}: {ref}"
            length = len(path.read_text().splitlines())
            for span in (found["lines"] or "").split(","):
                if span:
                    first, _, last = span.partition("-")
                    assert 1 <= int(first) <= int(last or first) <= length, f"{rule['id']}: {ref}"


def test_first_releases_are_the_first_tags_that_write_the_kernel(catalog: Catalog) -> None:
    if not SCRIPTS.is_dir():
        pytest.skip("../shared/upstream-scripts is not beside this checkout")
    tags = _tags()
    for kernel, first in catalog.first_releases.items():
        assert first in catalog.releases, kernel
        literal = re.compile(r"kernel_name\"?\s*[:=]\s*\"" + re.escape(kernel) + '"')

        def writes(tag: str, pattern: re.Pattern[str] = literal) -> bool:
            return any(pattern.search(p.read_text()) for p in (SCRIPTS / tag).rglob("*.py"))

        assert writes(f"v{first}"), f"{kernel}: v{first} does not write it"
        earlier = [t for t in tags if Version(t[1:]) < Version(first)]
        assert not any(writes(t) for t in earlier), f"{kernel}: written before v{first}"


def test_releases_are_ordered_and_cover_every_tag(catalog: Catalog) -> None:
    versions = [Version(v) for v in catalog.releases]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    if SCRIPTS.is_dir():
        assert {t[1:] for t in _tags()} <= set(catalog.releases)


def test_earliest_label_is_the_release_before_the_first(catalog: Catalog) -> None:
    # main between v0.8.0 and v0.8.1 reported 0.8.0 (the seed row is such a row)
    assert catalog.earliest_label("megatron_rms_norm") == "0.8.0"
    assert not catalog.predates_benchmark("megatron_rms_norm", "0.8.0")
    assert catalog.predates_benchmark("megatron_rms_norm", "0.7.0")
    assert catalog.predates_benchmark("multi_token_attention", "0.1.1")
    assert not catalog.predates_benchmark("some_future_kernel", "0.0.1")  # unknown: no claim


def test_kernel_names_split_an_embedded_parameter(catalog: Catalog) -> None:
    assert catalog.split_kernel("dyt_beta=True") == ("dyt", {"beta": True})
    assert catalog.split_kernel("dyt_beta=False") == ("dyt", {"beta": False})
    assert catalog.split_kernel("dyt") == ("dyt", {})
    assert catalog.split_kernel("dyt_beta=maybe") == ("dyt_beta=maybe", {})
    for pattern in catalog.kernel_names:
        assert "kernel" in pattern.pattern.groupindex, pattern.id


def test_protocol_variants_match_what_the_scripts_do(catalog: Catalog) -> None:
    find = catalog.protocol_variant
    assert find("megatron_rms_norm", "speed", "backward", "0.8.1") is not None
    assert find("megatron_rms_norm", "speed", "full", "0.8.1") is None  # the seed's protocol
    assert find("megatron_rms_norm", "memory", "backward", "0.8.1") is None
    cross_entropy = find("megatron_cross_entropy", "speed", "forward", "0.8.1")
    assert cross_entropy is not None and "CUDA events" in (cross_entropy.notes or "")
    assert find("group_norm", "memory", "forward", "0.7.0") is not None
    assert find("group_norm", "memory", "forward", "0.8.0") is None  # fixed in 0.8.0
    assert find("group_norm", "memory", "full", "0.7.0") is None  # full was always full
    names = [p.name for p in catalog.protocol_variants]
    assert len(set(names)) == len(names)


def test_catalog_version_changes_with_any_file(tmp_path: Path) -> None:
    packaged = load_catalog()
    assert re.match(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}\.[0-9]+\+[0-9a-f]{12}$", packaged.version)
    assert packaged.version.split("+")[0] == _workloads()["catalogVersion"]
    assert load_catalog().version == packaged.version
    source = resources.files("kindex_etl.catalog")
    with resources.as_file(source.joinpath("workloads.json")) as path:
        shutil.copy(path, tmp_path / "workloads.json")
    assert load_catalog(tmp_path).version == packaged.version  # same content, same version
    data = json.loads((tmp_path / "workloads.json").read_text())
    data["variants"][0]["dead"] = ["B"]
    (tmp_path / "workloads.json").write_text(json.dumps(data))
    changed = load_catalog(tmp_path)
    assert changed.version != packaged.version
    assert changed.version.split("+")[0] == packaged.version.split("+")[0]
    gpus = json.loads(source.joinpath("gpus.json").read_text("utf-8"))
    gpus["gpus"].append({**gpus["gpus"][0], "match": "NVIDIA Z1"})
    (tmp_path / "workloads.json").unlink()
    (tmp_path / "gpus.json").write_text(json.dumps(gpus))
    assert load_catalog(tmp_path).version != packaged.version


def test_docs_describe_every_rule() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "catalog.md").read_text()
    for rule in _rules():
        assert f"`{rule['id']}`" in docs or rule["id"] in docs, rule["id"]
        for ref in rule["evidence"]:
            assert ref in docs, f"{rule['id']}: {ref} is not in docs/catalog.md"
