"""The docs cannot rot: every fenced code block of README.md, CONTRIBUTING.md, CHANGELOG.md and
docs/ says whether a test runs it, the runnable ones run here (offline, in a temporary folder
that holds the demo's warehouse), every relative link and #anchor leads somewhere, and every
option the README's command table names is one the command has.

docs/reading.md's blocks run in tests/test_reading_docs.py instead, where their answers are
checked against a local warehouse and the same warehouse on S3; README.md's Python blocks are
also checked for their answers in tests/test_readme_queries.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kindex_etl import ingest
from kindex_etl.analysis.run import demo_report
from kindex_etl.cli.app import build_parser
from kindex_etl.demo import lay_out_upstream
from tests.docs_blocks import CODE, REPO, Block, blocks, markdown_files

READING = REPO / "docs" / "reading.md"
ALL_BLOCKS = [b for p in markdown_files() for b in blocks(p) if b.lang in CODE]
# reading.md runs in test_reading_docs.py (local and S3); `requires=` blocks in their own venv.
HERE = [b for b in ALL_BLOCKS if b.runnable and not b.requires and b.path != READING]
PYTHON_FILES = sorted({b.path for b in HERE if b.lang == "python"})
SHELL = [b for b in HERE if b.lang != "python"]


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the README's first run leaves behind: `kindex-demo/{upstream,warehouse}` (the
    offline sample, ingested in-process: the flow and its server are tests/cli's to check)."""
    root = tmp_path_factory.mktemp("docs")
    lay_out_upstream(root / "kindex-demo" / "upstream", offline=True)
    ingest(str(root / "kindex-demo" / "upstream"), str(root / "kindex-demo" / "warehouse"))
    demo_report(str(root / "kindex-demo" / "warehouse"))  # the analysis the demo ends with
    return root


def test_every_code_block_says_whether_it_runs() -> None:
    unmarked = [b.where for b in ALL_BLOCKS if ("runnable" in b.words) == ("no-run" in b.words)]
    assert not unmarked, f"say `runnable` or `no-run` after the language: {unmarked}"
    assert PYTHON_FILES and SHELL  # the convention is in use, not vacuous


def test_blocks_with_packages_of_their_own_are_run_somewhere() -> None:
    """Only test_reading_docs.py makes an interpreter for a `requires=` block."""
    assert [b.path for b in ALL_BLOCKS if b.requires] == [READING]


@pytest.mark.parametrize("path", PYTHON_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_python_blocks_run_in_order(
    path: Path, demo_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(demo_root)
    ns: dict[str, Any] = {"__name__": "doc"}
    for block in (b for b in HERE if b.path == path and b.lang == "python"):
        exec(compile(block.text, block.where, "exec"), ns)
    assert capsys.readouterr().out  # every such file shows the reader something


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.where)
def test_shell_blocks_run(block: Block, demo_root: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)  # this venv's kindex-etl and python
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),  # this checkout, whatever the venv was installed from
        "KINDEX_OFFLINE": "1",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=demo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{block.where}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


# Links: [text](target "title"), images included; code blocks are not prose.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
FENCED = re.compile(r"^ *```.*?^ *```", re.DOTALL | re.MULTILINE)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _prose(path: Path) -> str:
    return FENCED.sub("", path.read_text(encoding="utf-8"))


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in HEADING.findall(_prose(path))}


def test_links_and_anchors_resolve() -> None:
    broken = []
    for path in markdown_files() + sorted((REPO / "deploy").glob("*.md")):
        for target in LINK.findall(_prose(path)):
            if re.match(r"[a-z]+:", target):  # http(s), mailto: not ours to check offline
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                broken.append(f"{path.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, broken


def test_link_check_catches_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Where `it` is, and why\n\ntext\n")
    assert _anchors(tmp_path / "a.md") == {"where-it-is-and-why"}
    assert _slug("6b. The daily maintenance") == "6b-the-daily-maintenance"


def test_readme_command_table_names_real_options() -> None:
    """A command or option renamed in the code fails here until the README follows."""
    parser = build_parser()
    [sub] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    commands: dict[str, Any] = sub.choices  # type: ignore[assignment]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = [line for line in readme.splitlines() if line.startswith("| `kindex-etl ")]
    named = set()
    for row in table:
        cell = row.split(" | ")[0]
        for part in cell.split(" / "):
            words = re.findall(r"kindex-etl ([a-z]+)((?:[^`])*)", part)
            for command, rest in words:
                assert command in commands, f"README names no such command: {command}"
                named.add(command)
                options = {o for a in commands[command]._actions for o in a.option_strings}
                for option in re.findall(r"--[a-z][a-z-]*", rest):
                    assert option in options, f"kindex-etl {command} has no {option}"
    assert named == set(commands), f"commands missing from the README: {set(commands) - named}"


def test_readme_set_up_is_what_ci_runs() -> None:
    """The README's test command is the line .ci/run runs, word for word."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    readme = [b.text.strip() for b in blocks(REPO / "README.md") if b.lang == "sh"]
    line = (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest"
    )
    assert line in readme and line in ci.splitlines()
    demo = "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/kindex-etl demo"
    assert demo in readme


def test_readme_fits_a_newcomer() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for path in markdown_files():
        diary = re.findall(r"\bstop \d", path.read_text(encoding="utf-8"), flags=re.IGNORECASE)
        assert not diary, f"{path.relative_to(REPO)}: history belongs in git and CHANGELOG.md"


DOCS_WITHOUT_READER_LINE: frozenset[str] = frozenset()


def test_every_doc_says_who_it_is_for() -> None:
    missing = []
    for path in markdown_files():
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        # The title, then a line in italics that starts with "For:".
        if len(lines) < 2 or not lines[1].startswith("*For:"):
            missing.append(str(path.relative_to(REPO)))
    assert not missing, missing


def test_generated_tables_doc_is_marked_generated() -> None:
    text = (REPO / "docs" / "tables.md").read_text(encoding="utf-8")
    assert "kindex-etl schema --tables --format markdown" in text
