"""Which upstream commits changed each kernel's Liger source: the diff as evidence.

    python -m kindex_etl.catalog.sources --repo LIGER.git [--out kindex_etl/catalog/sources.json]

For every first-parent commit of upstream's `main`, the Python files it changed under
`src/liger_kernel/` are mapped to the benchmark kernel names (`harness.json`'s scripts) whose
code they hold:

- a file named after the kernel's benchmark script (`ops/rms_norm.py`, `transformers/rms_norm.py`
  and `chunked_loss/dpo_loss.py` for `benchmark_rms_norm.py`, `benchmark_dpo_loss.py`), or
  whose stem the script's stem contains (`chunked_loss/jsd_loss.py` for `distill_jsd_loss`);
- the `liger_kernel` modules such a file imports at `main`'s head, one level (the chunked
  losses' shared `fused_linear_preference.py`);
- `ops/utils.py`, which every Triton op imports: every kernel.

Other backends (`ops/backends/`: Ascend NPU), model patches (`transformers/model/`,
`monkey_patch.py`) and package `__init__` files change no CUDA kernel's code and are left out.
The mapping is made at the head's layout: a file renamed since is matched by its name then.
The analysis reads it as evidence (`analysis/rules.py`, rule 5): at a step many kernels share,
a kernel whose source no commit in the step's range touched moved with the environment.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
from collections.abc import Iterable
from fnmatch import fnmatch
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .history import load_history

SRC = "src/liger_kernel/"
SHARED = {"src/liger_kernel/ops/utils.py"}
_SKIP = ("/backends/", "/model/", "monkey_patch", "__init__.py")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "--git-dir", str(repo), *args], check=True, capture_output=True)
    return done.stdout.decode("utf-8", "replace")


def kernel_scripts(harness_doc: dict[str, Any]) -> dict[str, set[str]]:
    """Script stem (`rms_norm`) -> the upstream kernel names its rows carry."""
    out: dict[str, set[str]] = {}
    for script, revisions in harness_doc.get("scripts", {}).items():
        stem = Path(script).stem.removeprefix("benchmark_")
        for rev in revisions:
            out.setdefault(stem, set()).update(rev.get("kernel_names", []))
    return out


def _imports(source: str) -> set[str]:
    """The liger_kernel modules a file imports, as paths under src/."""
    found: set[str] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("liger_kernel.")
        ):
            found.add("src/" + str(node.module).replace(".", "/") + ".py")
    return found


def owners(files: Iterable[str], stems: Iterable[str], head: dict[str, str]) -> dict[str, set[str]]:
    """File -> the script stems whose kernel code it holds (see the module doc)."""
    code = [f for f in files if f.startswith(SRC) and f.endswith(".py") and not _skipped(f)]
    own: dict[str, set[str]] = {}
    for stem in stems:
        named = [f for f in code if Path(f).stem == stem or Path(f).stem in stem]
        for f in named:
            own.setdefault(f, set()).add(stem)
            for dep in _imports(head.get(f, "")):
                if dep in head and not _skipped(dep):
                    own.setdefault(dep, set()).add(stem)
    return own


def _skipped(path: str) -> bool:
    return any(s in path for s in _SKIP)


def build(repo: Path, ref: str = "main") -> dict[str, Any]:
    harness = json.loads(resources.files(__package__).joinpath("harness.json").read_text())
    scripts = kernel_scripts(harness)
    listing = _git(repo, "ls-tree", "-r", "--name-only", ref, SRC).split()
    head = {f: _git(repo, "show", f"{ref}:{f}") for f in listing if f.endswith(".py")}
    own = owners(head, scripts, head)
    history = load_history()
    log = _git(repo, "log", "--first-parent", "--name-only", "--format=@%H", ref)
    touched: dict[str, set[str]] = {}
    sha = ""
    for line in log.splitlines():
        if line.startswith("@"):
            sha = line[1:8]
            continue
        if not line or history.commit(sha) is None or _skipped(line):
            continue
        stems = set(scripts) if line in SHARED else own.get(line, set())
        for stem in stems:
            for kernel in scripts[stem]:
                touched.setdefault(kernel, set()).add(sha)
    by_position = {
        k: sorted(shas, key=lambda s: history.position(s) or 0) for k, shas in touched.items()
    }
    return {
        "format": 1,
        "source": {
            "repository": "linkedin/Liger-Kernel",
            "head": _git(repo, "rev-parse", ref).strip(),
        },
        "kernels": dict(sorted(by_position.items())),
    }


class Sources:
    """Per upstream kernel name, the positions of the commits that changed its source."""

    def __init__(self, doc: dict[str, Any]) -> None:
        history = load_history()
        self.known = bool(doc.get("kernels"))
        self._positions: dict[str, list[int]] = {}
        for kernel, shas in doc.get("kernels", {}).items():
            found = (history.position(s) for s in shas)
            self._positions[kernel] = sorted(p for p in found if p is not None)
        self.head = history.commits[-1].position if history.commits else None

    def _of(self, kernel: str) -> list[int] | None:
        found = self._positions.get(kernel)
        if found is None:  # a pattern such as `dyt_beta=*` names several kernels
            found = next(
                (v for k, v in self._positions.items() if "*" in k and fnmatch(kernel, k)), None
            )
        return found

    def touched(self, kernel: str, before: int | None, after: int | None) -> list[int] | None:
        """Positions in (before, after] that changed `kernel`'s source; None where nothing
        says (a kernel the catalog maps no file to, unknown positions, a range past the
        catalog's head)."""
        positions = self._of(kernel)
        if positions is None or before is None or after is None or self.head is None:
            return None
        if after > self.head:
            return None
        return [p for p in positions if before < p <= after]


@cache
def default_sources() -> Sources:
    # The evaluation's injected steps stand for code changes: it names a copy with their
    # commits added (benchmarks/eval/inject.py).
    override = os.environ.get("KINDEX_SOURCES_JSON")
    try:
        if override:
            return Sources(json.loads(Path(override).read_text()))
        text = resources.files(__package__).joinpath("sources.json").read_text()
    except FileNotFoundError:
        return Sources({})
    return Sources(json.loads(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="Liger-Kernel git dir (bare ok)")
    parser.add_argument("--ref", default="main")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("sources.json"))
    args = parser.parse_args(argv)
    repo = args.repo / ".git" if (args.repo / ".git").exists() else args.repo
    doc = build(repo, args.ref)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{args.out}: {len(doc['kernels'])} kernels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
