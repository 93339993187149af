"""The benchmark suite of one release: which scripts run here, which are skipped and why, and
how long each may take.

Every `benchmark/scripts/benchmark_<kernel>.py` of the sdist with a `__main__` block is a
candidate (the others are helper modules the scripts import). A candidate is skipped, with its
reason, when

- the catalog (`kindex_etl/catalog/rerun_scripts.json`) says it is not a single-process script;
- its name ends in an architecture suffix (`_sm90`) that this GPU's compute capability is not;
- a module it imports at top level (outside `try:`) is not importable by the interpreter and
  PYTHONPATH that would run it: a missing optional dependency.

Timeouts are per script: `max(minSeconds, factor * expectedSeconds)` from that catalog, where
expectedSeconds is what the script took on an H200, and unknown scripts get the default.
"""

from __future__ import annotations

import ast
import json
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

PREFIX = "benchmark_"

_FIND = r"""
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
out = {}
for name in sys.argv[2:]:
    try:
        out[name] = importlib.util.find_spec(name) is not None
    except Exception:
        out[name] = False
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Script:
    kernel: str
    name: str  # benchmark_<kernel>.py
    expected_s: float
    timeout_s: float


@dataclass(frozen=True)
class Skipped:
    kernel: str
    name: str
    reason: str


@cache
def catalog() -> dict[str, Any]:
    # By path, not through the kindex_etl.catalog package: that imports rfc8785 and packaging,
    # which a bare GPU host (torch and triton only) does not have.
    text = (Path(__file__).parent.parent / "catalog" / "rerun_scripts.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def candidates(scripts_dir: Path) -> list[str]:
    """Kernels with a runnable benchmark script (a `__main__` block), sorted."""
    out = []
    for path in sorted(scripts_dir.glob(f"{PREFIX}*.py")):
        if _has_main(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            out.append(path.stem[len(PREFIX) :])
    return out


def _has_main(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return True
    return False


def top_level_imports(path: Path) -> set[str]:
    """First names of the absolute imports a script makes unconditionally (not inside try)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def importable(python: str, env: dict[str, str], scripts_dir: Path, names: set[str]) -> set[str]:
    """Which of `names` the scripts' interpreter can import (the scripts' folder first)."""
    if not names:
        return set()
    proc = subprocess.run(
        [python, "-c", _FIND, str(scripts_dir), *sorted(names)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return set()
    return {n for n, ok in found.items() if ok}


def timeout_for(expected_s: float) -> float:
    rule = catalog()["timeout"]
    return max(float(rule["minSeconds"]), float(rule["factor"]) * expected_s)


def expected_seconds(kernel: str) -> float:
    entry = catalog()["scripts"].get(kernel, {})
    return float(entry.get("expectedSeconds", catalog()["defaultExpectedSeconds"]))


def _arch_reason(kernel: str, capability: str | None) -> str | None:
    for suffix, capabilities in catalog()["archSuffixes"].items():
        if kernel.endswith(f"_{suffix}") and capability not in capabilities:
            return (
                f"built for compute capability {'/'.join(capabilities)} ({suffix}); "
                f"this GPU is {capability or 'unknown'}"
            )
    return None


def plan_suite(
    scripts_dir: Path,
    *,
    kernels: list[str] | None,
    python: str,
    env: dict[str, str],
    capability: str | None,
    timeout_override_s: float | None = None,
) -> tuple[list[Script], list[Skipped]]:
    """(scripts to run, scripts skipped with reasons); `kernels=None` means the whole suite.

    Raises ValueError for a named kernel the sdist ships no script for.
    """
    runnable = candidates(scripts_dir)
    if kernels is None:
        chosen = runnable
    else:
        missing = [k for k in kernels if k not in runnable]
        if missing:
            raise ValueError(
                f"the sdist ships no benchmark script for {', '.join(missing)}; "
                f"it has: {', '.join(runnable)}"
            )
        chosen = list(kernels)
    local = {p.stem for p in scripts_dir.glob("*.py")}
    imports = {k: top_level_imports(scripts_dir / f"{PREFIX}{k}.py") - local for k in chosen}
    available = importable(python, env, scripts_dir, set().union(*imports.values()))

    run: list[Script] = []
    skipped: list[Skipped] = []
    for kernel in chosen:
        name = f"{PREFIX}{kernel}.py"
        reason = catalog()["scripts"].get(kernel, {}).get("skip") or _arch_reason(
            kernel, capability
        )
        absent = sorted(imports[kernel] - available)
        if reason is None and absent:
            reason = f"missing optional dependency: {', '.join(absent)}"
        if reason is not None:
            skipped.append(Skipped(kernel, name, reason))
            continue
        expected = expected_seconds(kernel)
        timeout = timeout_override_s if timeout_override_s is not None else timeout_for(expected)
        run.append(Script(kernel, name, expected, timeout))
    return run, skipped
