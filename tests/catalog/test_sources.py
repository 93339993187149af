"""kindex_etl/catalog/sources.py: which commits changed a kernel's Liger source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kindex_etl.catalog.history import load_history
from kindex_etl.catalog.sources import Sources, build, default_sources, owners


def test_a_file_belongs_to_the_kernels_named_after_it_and_what_it_imports() -> None:
    head = {
        "src/liger_kernel/ops/rms_norm.py": "import triton\nfrom liger_kernel.ops.utils import x\n",
        "src/liger_kernel/ops/utils.py": "",
        "src/liger_kernel/chunked_loss/dpo_loss.py": (
            "from liger_kernel.chunked_loss.fused_linear_preference import P\n"
        ),
        "src/liger_kernel/chunked_loss/fused_linear_preference.py": "",
        "src/liger_kernel/ops/backends/_ascend/ops/rms_norm.py": "",
        "src/liger_kernel/transformers/model/llama.py": "",
    }
    own = owners(head, ["rms_norm", "dpo_loss", "swiglu"], head)
    assert own["src/liger_kernel/ops/rms_norm.py"] == {"rms_norm"}
    assert own["src/liger_kernel/chunked_loss/fused_linear_preference.py"] == {"dpo_loss"}
    # Another backend and the model patches hold no CUDA kernel's code.
    assert "src/liger_kernel/ops/backends/_ascend/ops/rms_norm.py" not in own
    assert "src/liger_kernel/transformers/model/llama.py" not in own
    assert not any("swiglu" in v for v in own.values())


def test_a_range_is_answered_only_where_the_catalog_knows_the_kernel() -> None:
    history = load_history()
    shas = [c.sha[:7] for c in history.commits[500:503]]
    sources = Sources({"kernels": {"rms_norm": shas[1:2], "dyt_beta=*": shas[2:3]}})
    assert sources.touched("rms_norm", 500, 502) == [501]
    assert sources.touched("rms_norm", 501, 502) == []
    assert sources.touched("dyt_beta=True", 500, 502) == [502]  # a pattern of the catalog
    assert sources.touched("swiglu", 500, 502) is None  # no file maps to it: nothing says
    assert sources.touched("rms_norm", None, 502) is None


def test_the_packaged_catalog_names_upstreams_kernel_rewrites() -> None:
    history = load_history()
    llama4 = default_sources().touched(
        "llama4_rope", history.position("1fdb668"), history.position("7644a0f")
    )
    # #1053 rewrote ops/llama4_rope.py; #994's script change (175cdf0) touched no source.
    assert llama4 == [history.position("ad6f0a7")]
    flce = default_sources().touched(
        "fused_linear_cross_entropy", history.position("7705dcc"), history.position("2845fe8")
    )
    assert flce is not None and history.position("2845fe8") in flce  # #830


def test_the_command_reads_a_repository(tmp_path: Path) -> None:
    repo = tmp_path / "liger"

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    repo.mkdir()
    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    ops = repo / "src/liger_kernel/ops"
    ops.mkdir(parents=True)
    (ops / "rms_norm.py").write_text("x = 1\n")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    (ops / "rms_norm.py").write_text("x = 2\n")
    git("commit", "-qam", "two")
    doc = build(repo / ".git")
    # The commits are not upstream's: the history catalog places none, so none is listed.
    assert doc["kernels"] == {}
    assert json.dumps(doc)
