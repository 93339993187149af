"""Reading one upstream CSV: every row as text, exact line numbers, bad files named."""

from __future__ import annotations

from pathlib import Path

import pytest

from kindex_etl.errors import BadFile
from kindex_etl.extract.read import read_batches
from kindex_etl.storage import LocalStore
from tests.helpers import SEED_LINE, seed_row

HEADER = ",".join(seed_row())


def _read(tmp_path: Path, text: str, **kwargs: int) -> list:
    (tmp_path / "f.csv").write_text(text)
    return list(read_batches(LocalStore(tmp_path), "f.csv", **kwargs))


def test_rows_stay_text_and_lines_count_from_the_header(tmp_path: Path) -> None:
    lines = [SEED_LINE.replace("0.8.0", f"0.8.{i}") for i in range(5)]
    batches = _read(tmp_path, HEADER + "\n" + "\n".join(lines) + "\n", block_size=300)
    assert len(batches) > 1  # small blocks: several batches, numbering carries across
    got = [n for b in batches for n in b.lines.tolist()]
    assert got == [2, 3, 4, 5, 6]
    versions = [v for b in batches for v in b.batch.column("liger_version").to_pylist()]
    assert versions == ["0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.8.4"]
    assert batches[0].batch.column("x_value").type == "string"


def test_a_malformed_line_is_reported_with_its_number_and_the_rest_kept(tmp_path: Path) -> None:
    text = HEADER + "\n" + SEED_LINE + "\nonly,three,fields\n" + SEED_LINE + "\n"
    batches = _read(tmp_path, text)
    assert [m.line for b in batches for m in b.malformed] == [3]
    assert [n for b in batches for n in b.lines.tolist()] == [2, 4]


@pytest.mark.parametrize(
    ("text", "reason"),
    [("", "empty_file"), ("a,b,c\n1,2,3\n", "bad_header")],
    ids=["empty", "not-upstream"],
)
def test_bad_files_are_named(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(BadFile) as err:
        _read(tmp_path, text)
    assert err.value.reason == reason
