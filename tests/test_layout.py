"""The package's layout holds: data flows one way, and nothing in kindex_etl imports flows.

Each stage may import itself, the stages before it, and the shared modules of rank 0; a module
that imports a later stage would make the stages a knot again.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "kindex_etl"
# In the order data flows; the top level composes them all.
RANKS = {
    "contracts": 0, "errors": 0, "config": 0, "memory": 0, "workers": 0, "scratch": 0,
    "flow_runs": 0,
    "catalog": 1,
    "storage": 2,
    "extract": 3,
    "normalize": 4,
    "load": 5,
    "ingestion": 6, "maintenance": 6,
    "analysis": 6, "report": 6,
    "reruns": 7,
    "gpu": 8,
    "api": 9, "cli": 9, "demo": 9, "__init__": 9,
}  # fmt: skip


def _stage(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("")
        out[".".join(rel.parts)] = path
    return out


def test_every_module_belongs_to_a_known_stage() -> None:
    stages = {_stage(m) for m in _modules()}
    assert stages <= set(RANKS), stages - set(RANKS)


def test_no_import_runs_against_the_flow_of_data() -> None:
    against = []
    for module, path in _modules().items():
        rank = RANKS[_stage(module)]
        for imported in _imports(path):
            if imported.startswith("flows"):
                if rank < 9:
                    against.append(f"{module} imports {imported}")
                continue
            if not imported.startswith("kindex_etl."):
                continue
            other = RANKS.get(_stage(imported))
            if other is not None and other > rank:
                against.append(f"{module} imports {imported}")
    assert against == []


def test_flows_import_only_the_package_and_each_other_through_common() -> None:
    for path in (REPO / "flows").glob("*.py"):
        for imported in _imports(path):
            if imported.startswith("flows.") and path.stem != "common":
                assert imported in ("flows.common", "flows.artifacts"), (path.name, imported)
