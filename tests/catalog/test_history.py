"""history.json / harness.json: the generator on a small git repository made here, the loader.

The generator test builds a repository with `git` in a temporary folder (no network): a
benchmark script, the test-tree reference it times, the shared timing helper, a side branch
merged without fast-forward, tags (one annotated), and edits that must and must not count as
harness revisions.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kindex_etl.catalog import history as catalog_history
from kindex_etl.catalog.history import load_harness, load_history
from kindex_etl.catalog.upstream_git import generate, main

UTILS = """\
import torch

QUANTILES = [0.5, 0.2, 0.8]


def _test_memory(func, quantiles=None):
    '''Peak memory.'''
    func()
    return torch.cuda.max_memory_allocated(), QUANTILES


def run_benchmarks(bench_test_fn, kernel_name, x_values):
    return [bench_test_fn(x) for x in x_values]
"""

TEST_FOO = """\
import torch


class RefFoo(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_foo():
    assert RefFoo()(1) == 2
"""

SCRIPT_FOO = """\
from utils import _test_memory
from utils import run_benchmarks


def bench(x):
    from test.transformers.test_foo import RefFoo

    return _test_memory(lambda: RefFoo()(x))


run_benchmarks(bench, kernel_name="foo", x_values=[1, 2])
"""

SCRIPT_BAR = """\
from utils import run_benchmarks

for mode in ["token", "sequence"]:
    kernel_name = f"bar_{mode}"
    run_benchmarks(lambda x: x, kernel_name=kernel_name, x_values=[1])
"""


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = 1_700_000_000
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        # A +0200 committer zone: history.json must still say UTC.
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "GIT_AUTHOR_DATE": f"@{self.clock} +0200",
            "GIT_COMMITTER_DATE": f"@{self.clock} +0200",
        }
        return subprocess.run(
            ["git", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args],
            cwd=self.path,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    def commit(self, message: str, files: dict[str, str | None]) -> str:
        for name, text in files.items():
            path = self.path / name
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.git("add", "-A")
        self.clock += 3600
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Repo, dict[str, str]]:
    repo = Repo(tmp_path_factory.mktemp("liger"))
    shas: dict[str, str] = {}
    shas["base"] = repo.commit(
        "base",
        {
            "src/liger_kernel/ops/foo.py": "def foo(x):\n    return x * 2\n",
            "test/__init__.py": "",
            "test/transformers/__init__.py": "",
            "test/transformers/test_foo.py": TEST_FOO,
            "benchmark/scripts/utils.py": UTILS,
        },
    )
    shas["script"] = repo.commit(
        "add benchmarks",
        {
            "benchmark/scripts/benchmark_foo.py": SCRIPT_FOO,
            "benchmark/scripts/benchmark_bar.py": SCRIPT_BAR,
        },
    )
    repo.git("tag", "v0.1.0")
    shas["noise"] = repo.commit(
        "a new test, a comment, imports, a docstring, a CSV column: none changes what is timed",
        {
            "test/transformers/test_foo.py": TEST_FOO + "\n\ndef test_more():\n    pass\n",
            # What a formatter does: a comment, imports joined and re-ordered, one unused.
            "benchmark/scripts/benchmark_foo.py": "# timing foo\nimport os\n"
            + SCRIPT_FOO.replace(
                "from utils import _test_memory\nfrom utils import run_benchmarks\n",
                "from utils import run_benchmarks, _test_memory\n",
            ),
            "benchmark/scripts/utils.py": UTILS.replace(
                "'''Peak memory.'''", "'''Peak.'''"
            ).replace("return [bench_test_fn(x)", "return [(1, bench_test_fn(x))"),
            "src/liger_kernel/ops/foo.py": "def foo(x):\n    return x + x\n",
        },
    )
    repo.git("checkout", "-q", "-b", "side")
    shas["side"] = repo.commit(
        "the reference changes on a side branch",
        {"test/transformers/test_foo.py": TEST_FOO.replace("x * 2", "x + x")},
    )
    repo.git("checkout", "-q", "main")
    repo.clock += 3600
    repo.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
    shas["merge"] = repo.git("rev-parse", "HEAD")
    shas["quantiles"] = repo.commit(
        "the timing helper's quantiles",
        {"benchmark/scripts/utils.py": UTILS.replace("[0.5, 0.2, 0.8]", "[0.5, 0.1, 0.9]")},
    )
    repo.git("tag", "-a", "v0.2.0", "-m", "release")
    shas["gone"] = repo.commit("drop bar", {"benchmark/scripts/benchmark_bar.py": None})
    return repo, shas


def test_history_orders_main_first_parents_with_their_first_release(
    upstream: tuple[Repo, dict[str, str]], tmp_path: Path
) -> None:
    repo, shas = upstream
    generate(repo.path, tmp_path)
    doc = json.loads((tmp_path / "history.json").read_text())
    order = ["base", "script", "noise", "merge", "quantiles", "gone"]
    assert [c["sha"] for c in doc["commits"]] == [shas[k] for k in order]
    assert [c["position"] for c in doc["commits"]] == list(range(6))
    assert [c["short"] for c in doc["commits"]] == [shas[k][:7] for k in order]
    assert [c["release"] for c in doc["commits"]] == [
        "v0.1.0",
        "v0.1.0",
        "v0.2.0",
        "v0.2.0",
        "v0.2.0",
        None,
    ]
    # @1_700_003_600 is 2023-11-14T23:13:20Z whatever zone the committer wrote.
    assert doc["commits"][0]["date"] == "2023-11-14T23:13:20Z"
    assert doc["source"] == {
        "repository": "linkedin/Liger-Kernel",
        "ref": "main",
        "head": shas["gone"],
    }
    assert doc["releases"] == [
        {"tag": "v0.1.0", "sha": shas["script"], "position": 1},
        {"tag": "v0.2.0", "sha": shas["quantiles"], "position": 4},
    ]
    history = load_history(tmp_path / "history.json")
    assert history.position(shas["side"]) is None  # not on the first-parent line
    assert history.first_release(shas["merge"][:7]) == "v0.2.0"
    assert history.version_span("0.1.0") == (1, 3)
    assert history.version_span("v0.2.0") == (4, 5)


def test_harness_counts_only_what_is_timed(
    upstream: tuple[Repo, dict[str, str]], tmp_path: Path
) -> None:
    repo, shas = upstream
    generate(repo.path, tmp_path)
    doc = json.loads((tmp_path / "harness.json").read_text())
    foo = doc["scripts"]["benchmark/scripts/benchmark_foo.py"]
    assert [(r["position"], r["changed"]) for r in foo] == [
        (1, ["created"]),
        (3, ["test/transformers/test_foo.py:RefFoo"]),
        (4, ["benchmark/scripts/utils.py:QUANTILES"]),
    ]
    assert foo[0]["sha"] == shas["script"][:7]
    assert foo[0]["kernel_names"] == ["foo"]
    bar = doc["scripts"]["benchmark/scripts/benchmark_bar.py"]
    assert [(r["position"], r.get("removed", False)) for r in bar] == [(1, False), (5, True)]
    assert bar[0]["kernel_names"] == ["bar_*"]

    harness = load_harness(tmp_path / "harness.json")
    assert harness.revisions("foo") == [1, 3, 4]
    assert harness.revisions("bar_token") == [1]  # a deletion is no revision
    assert harness.kernel_scripts("bar_sequence") == ["benchmark/scripts/benchmark_bar.py"]
    assert harness.revisions("baz") == [] and not harness.known("baz")
    assert harness.between("foo", 1, 3) == [3]
    assert harness.between("foo", 3, 5) == [4]
    assert harness.between("foo", 1, 2) == []
    assert harness.revision_at("foo", 2) == 1
    assert harness.revision_at("foo", 0) is None


def test_generator_is_reproducible(
    upstream: tuple[Repo, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, _ = upstream
    # A non-bare checkout and its bare clone give the same bytes.
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(repo.path), str(bare)], check=True)
    assert main([str(repo.path), "--out", str(tmp_path / "a")]) == 0
    assert main([str(bare), "--out", str(tmp_path / "b")]) == 0
    assert "history.json" in capsys.readouterr().out
    for name in ("history.json", "harness.json", "baselines.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_packaged_history_knows_the_gh_pages_commits() -> None:
    history = load_history()
    assert history.repository == "linkedin/Liger-Kernel"
    positions = [c.position for c in history.commits]
    assert positions == list(range(len(positions)))
    # gh-pages folders `0a62700-v0.6.4` and `7644a0f-v0.7.0` are the release commits.
    assert catalog_history.first_release("0a62700") == "v0.6.4"
    assert catalog_history.first_release("7644a0f") == "v0.7.0"
    assert history.release("0.6.4") is not None
    assert history.position("0a62700") == history.release("0.6.4").position  # type: ignore[union-attr]
    assert catalog_history.position("b6ed735") is not None
    assert catalog_history.position("0000000") is None
    assert catalog_history.position("0a6") is None  # too short to be an identity


def test_packaged_harness_covers_the_written_kernel_names() -> None:
    harness = load_harness()
    for kernel in ("rms_norm", "dpo_loss", "fused_linear_cross_entropy", "embedding"):
        revisions = catalog_history.harness_revisions(kernel)
        assert revisions == sorted(revisions) and revisions, kernel
    # A formatted name is matched by its pattern.
    assert harness.revisions("dyt_beta=True")
    assert harness.revisions("fused_linear_grpo_loss_token")


# ---------------------------------------------------------------- harness revisions per provider

REF = """\
import torch


class RefLoss(torch.nn.Module):
    def forward(self, x):
        return (x * 2).sum()


def test_ref():
    assert RefLoss()(torch.ones(1)) == 2
"""

UPSTREAM_SCRIPT = """\
import torch
from utils import QUANTILES, run_benchmarks

from liger_kernel.ops import LigerLoss


class LigerWrap(torch.nn.Module):
    def __init__(self, H):
        super().__init__()
        self.loss = LigerLoss(reduction="mean")

    def forward(self, x):
        return self.loss(x)


def bench(input):
    from test.chunked_loss.test_ref import RefLoss

    provider = input.kernel_provider
    x = torch.randn(input.x, 64)
    liger_loss = LigerWrap(64)
    ref_loss = RefLoss()

    def fwd():
        if provider == "liger":
            return liger_loss(x)
        elif provider == "torch":
            return ref_loss(x)

    return torch.quantile(fwd(), torch.tensor(QUANTILES))


run_benchmarks(bench, kernel_name="loss", x_values=[1024], kernel_providers=["liger", "torch"])
"""

# #830's shape: an option plumbed through liger's wrapper (default None, forwarded), a wrapper
# built with it, a new `elif` and a longer provider list. liger's own calls are unchanged.
ADD_PROVIDER = (
    UPSTREAM_SCRIPT.replace("def __init__(self, H):", "def __init__(self, H, accum=None):")
    .replace('LigerLoss(reduction="mean")', 'LigerLoss(reduction="mean", accum=accum)')
    .replace(
        "    ref_loss = RefLoss()\n",
        "    ref_loss = RefLoss()\n    liger_fp32 = LigerWrap(64, accum=torch.float32)\n",
    )
    .replace(
        '        elif provider == "torch":',
        '        elif provider == "liger-fp32":\n            return liger_fp32(x)\n'
        '        elif provider == "torch":',
    )
    .replace('["liger", "torch"]', '["liger", "liger-fp32", "torch"]')
)


@pytest.fixture(scope="module")
def per_provider(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo = Repo(tmp_path_factory.mktemp("liger-providers"))
    shas = {
        "created": repo.commit(
            "a two-provider benchmark and the reference its torch provider times",
            {
                "benchmark/scripts/utils.py": UTILS,
                "test/__init__.py": "",
                "test/chunked_loss/__init__.py": "",
                "test/chunked_loss/test_ref.py": REF,
                "benchmark/scripts/benchmark_loss.py": UPSTREAM_SCRIPT,
            },
        ),
        "added": repo.commit(
            "a provider added", {"benchmark/scripts/benchmark_loss.py": ADD_PROVIDER}
        ),
        "reference": repo.commit(
            "the test-tree reference changes",
            {"test/chunked_loss/test_ref.py": REF.replace("(x * 2).sum()", "(x + x).sum()")},
        ),
        "liger": repo.commit(
            "liger's branch changes",
            {
                "benchmark/scripts/benchmark_loss.py": ADD_PROVIDER.replace(
                    "return liger_loss(x)", "return liger_loss(x.contiguous())"
                )
            },
        ),
        "shapes": repo.commit(
            "the input shape every provider reads changes",
            {
                "benchmark/scripts/benchmark_loss.py": ADD_PROVIDER.replace(
                    "return liger_loss(x)", "return liger_loss(x.contiguous())"
                ).replace("torch.randn(input.x, 64)", "torch.randn(input.x, 128)")
            },
        ),
    }
    return repo.path, shas


def test_harness_revisions_name_the_providers_whose_code_changed(
    per_provider: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, shas = per_provider
    generate(path, tmp_path)
    doc = json.loads((tmp_path / "harness.json").read_text())
    revisions = doc["scripts"]["benchmark/scripts/benchmark_loss.py"]
    assert (
        [(r["sha"], r["providers"]) for r in revisions]
        == [
            (shas["created"][:7], None),
            (shas["added"][:7], ["liger-fp32"]),  # adding a provider spares liger and torch
            (shas["reference"][:7], ["torch"]),  # the reference only torch times
            (shas["liger"][:7], ["liger"]),
            (shas["shapes"][:7], None),  # shared code: every provider
        ]
    )
    assert doc["kernels"]["loss"]["revisions"] == [0, 1, 2, 3, 4]
    assert doc["kernels"]["loss"]["providers"] == {
        "1": ["liger-fp32"],
        "2": ["torch"],
        "3": ["liger"],
    }

    harness = load_harness(tmp_path / "harness.json")
    assert harness.revisions("loss") == [0, 1, 2, 3, 4]  # no provider: every revision
    assert harness.revisions("loss", "liger") == [0, 3, 4]
    assert harness.revisions("loss", "torch") == [0, 2, 4]
    assert harness.between("loss", 0, 2, provider="liger") == []
    assert harness.between("loss", 0, 2, provider="torch") == [2]
    assert harness.revision_at("loss", 2, provider="liger") == 0
    assert harness.revision_at("loss", 2) == 2
    assert harness.touched("loss", 2) == frozenset({"torch"})
    assert harness.touched("loss", 4) is None

    from kindex_etl.extract.history import from_catalog

    view = from_catalog(load_history(tmp_path / "history.json"), harness)
    assert view.harness_revision("loss", 2, "liger") == shas["created"][:7]
    assert view.harness_revision("loss", 2, "torch") == shas["reference"][:7]
    assert view.harness_revision("loss", 2) == shas["reference"][:7]


def test_plain_history_reads_revisions_per_provider() -> None:
    from kindex_etl.extract.history import History

    history = History.of(
        [{"sha": "a" * 40, "position": 0}, {"sha": "b" * 40, "position": 1}],
        {"loss": [{"sha": "a" * 40}, {"sha": "b" * 40, "providers": ["torch"]}]},
    )
    assert history.harness_revision("loss", 1, "liger") == "a" * 7
    assert history.harness_revision("loss", 1, "torch") == "b" * 7
    assert history.harness_revision("loss", 1) == "b" * 7


def test_packaged_harness_splits_only_the_providers_upstream_changed() -> None:
    """Issue 50's cases, as the committed harness.json (made from upstream's git) has them."""
    harness = load_harness()
    history = load_history()

    def at(sha: str) -> int:
        found = history.position(sha)
        assert found is not None, sha
        return found

    # #830 added `liger-fp32-accum` to the script: liger's and huggingface's series go on.
    flce = at("2845fe8")
    assert harness.touched("fused_linear_cross_entropy", flce) == frozenset({"liger-fp32-accum"})
    assert flce not in harness.revisions("fused_linear_cross_entropy", "liger")
    assert flce in harness.revisions("fused_linear_cross_entropy")
    # #862 and #974 changed the test-tree reference `HFJSDLoss`, which only `torch` times.
    for sha in ("a089cd5", "33f7f48"):
        assert harness.touched("distill_jsd_loss", at(sha)) == frozenset({"torch"}), sha
        assert at(sha) not in harness.revisions("distill_jsd_loss", "liger")
        assert at(sha) in harness.revisions("distill_jsd_loss", "torch")


def test_baselines_per_release_come_from_each_release_script(tmp_path: Path) -> None:
    """A release's baselines are the non-liger providers its script ran from its tag to the
    next tag (main still reports the older version there)."""
    (tmp_path / "up").mkdir()
    repo = Repo(tmp_path / "up")
    hf = UPSTREAM_SCRIPT.replace('"torch"', '"huggingface"')
    repo.commit(
        "huggingface as the baseline",
        {
            "benchmark/scripts/utils.py": UTILS,
            "test/__init__.py": "",
            "test/chunked_loss/__init__.py": "",
            "test/chunked_loss/test_ref.py": REF,
            "benchmark/scripts/benchmark_loss.py": hf.replace(
                '["liger", "huggingface"]', '["liger", "liger-fp32", "huggingface"]'
            ),
        },
    )
    repo.git("tag", "v0.1.0")
    repo.commit("torch instead", {"benchmark/scripts/benchmark_loss.py": UPSTREAM_SCRIPT})
    repo.commit("unrelated", {"README.md": "x\n"})
    repo.git("tag", "v0.2.0")
    generate(repo.path, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "baselines.json").read_text())
    assert doc["kernels"]["loss"] == [
        {"release": "v0.1.0", "baselines": ["huggingface", "torch"]},
        {"release": "v0.2.0", "baselines": ["torch"]},
    ]

    from kindex_etl.catalog.baselines import load_baselines

    baselines = load_baselines(tmp_path / "out" / "baselines.json")
    assert baselines.for_release("loss", "0.1.0") == ("huggingface", "torch")
    assert baselines.for_release("loss", "0.2.0") == ("torch",)
    assert baselines.for_release("loss", "0.3.1") == ("torch",)  # newer: the last release's
    assert baselines.for_release("loss", "0.0.9") == ("huggingface", "torch")  # older: first
    assert baselines.ever("loss") == ("huggingface", "torch")
    # A kernel the file does not know: kernels.json's hand-kept baseline.
    assert baselines.for_release("megatron_cross_entropy", "0.8.1") == ("megatron-fused",)


def test_packaged_baselines_resolve_names_that_embed_a_parameter() -> None:
    from kindex_etl.catalog.baselines import baseline_for

    # benchmark_dyt.py wrote `dyt_beta=True` / `dyt_beta=False` (v0.5.10-v0.8.0): kernel `dyt`.
    assert "torch" in baseline_for("dyt", "0.6.4")
    # benchmark_grpo_loss.py formats `fused_linear_grpo_loss_{type}`.
    assert baseline_for("fused_linear_grpo_loss_token", "0.8.1") == ("torch",)


CONFIG_SCRIPT = """\
from utils import run_benchmarks


def bench(input):
    T = input.extra_benchmark_config["T"]
    return T * input.x


run_benchmarks(
    bench,
    kernel_name="loss",
    x_name="B",
    x_values=[1],
    extra_benchmark_configs=[{"T": 8, "mode": "forward", "dtype": "bf16"}],
)
"""


def test_variants_drop_the_config_keys_a_release_script_never_reads(tmp_path: Path) -> None:
    (tmp_path / "up").mkdir()
    repo = Repo(tmp_path / "up")
    repo.commit(
        "mode is written, never read",
        {"benchmark/scripts/utils.py": UTILS, "benchmark/scripts/benchmark_loss.py": CONFIG_SCRIPT},
    )
    repo.git("tag", "v0.1.0")
    repo.commit("a comment-free no-op elsewhere", {"README.md": "x\n"})
    repo.git("tag", "v0.2.0")
    repo.commit(
        "mode is read now",
        {
            "benchmark/scripts/benchmark_loss.py": CONFIG_SCRIPT.replace(
                "    return T * input.x",
                '    return T * input.x * (2 if input.extra_benchmark_config["mode"] else 1)',
            )
        },
    )
    repo.git("tag", "v0.3.0")
    opaque = CONFIG_SCRIPT.replace(
        "return T * input.x", "return T * len(input.extra_benchmark_config)"
    )
    repo.commit("the whole config is handed on", {"benchmark/scripts/benchmark_loss.py": opaque})
    repo.git("tag", "v0.4.0")
    generate(repo.path, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "variants.json").read_text())
    assert doc["variants"] == [
        {
            "id": "derived:loss/B:0.1.0-0.2.0",
            "kernels": ["loss"],
            "x_name": "B",
            "keys": ["T", "dtype", "mode"],
            "dead": ["mode"],
            "versions": ">=0.1.0,<=0.2.0",
            "evidence": ["v0.2.0:benchmark/scripts/benchmark_loss.py"],
        }
    ]
