"""The fenced code blocks of the project's Markdown files, and what their info strings say.

The convention (CONTRIBUTING.md, "Docs that run"): a fence whose language is one of `CODE` says
`runnable` (a test runs it) or `no-run` (it needs what a test has not got) after the language.
`requires=A,B` beside `runnable` names packages the block needs in an interpreter of its own
(pip requirement specifiers, comma separated), for a recipe whose pins clash with ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CODE = frozenset({"python", "sh", "bash", "console", "shell"})
# A fence at the start of a line (or indented, inside a list), closed by the same indent.
FENCE = re.compile(r"^( *)```([^\n`]*)\n(.*?)^\1```[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    words: tuple[str, ...]
    text: str

    @property
    def runnable(self) -> bool:
        return "runnable" in self.words

    @property
    def requires(self) -> list[str]:
        for w in self.words:
            if w.startswith("requires="):
                return w.removeprefix("requires=").split(",")
        return []

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def markdown_files() -> list[Path]:
    """README, CONTRIBUTING, CHANGELOG and every doc: what a reader of the project reads."""
    top = [REPO / n for n in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    return [p for p in top if p.exists()] + sorted((REPO / "docs").rglob("*.md"))


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        indent, info, body = m.groups()
        words = tuple(info.split())
        lang = words[0] if words else ""
        body = "\n".join(line.removeprefix(indent) for line in body.splitlines()) + "\n"
        found.append(Block(path, text.count("\n", 0, m.start()) + 1, lang, words[1:], body))
    return found


def runnable(path: Path, lang: str) -> list[str]:
    """The text of the blocks of `lang` that a test runs, in the file's order."""
    return [b.text for b in blocks(path) if b.lang == lang and b.runnable and not b.requires]
