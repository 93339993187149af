"""Reading one upstream object: exact physical lines, and whole-object problems as BadFile."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pytest

from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from kindex_etl.errors import BadFile
from kindex_etl.extract.read import _may_break, check_header, count_lines, read_batches
from kindex_etl.storage import LocalStore
from tests.helpers import SEED_LINE

HEADER = ",".join(UPSTREAM_COLUMNS)
# The seed row with a newline inside its quoted config: one record on two lines.
TWO_LINE_ROW = SEED_LINE.replace('"{""S"": 4096, ""B"": 1}"', '"{""S"": 4096,\n ""B"": 1}"')


def _batches(tmp_path: Path, text: str, **kwargs: int) -> list:
    (tmp_path / "f.csv").write_text(text)
    return list(read_batches(LocalStore(tmp_path), "f.csv", **kwargs))


def test_rows_stay_text_and_lines_count_from_the_header(tmp_path: Path) -> None:
    lines = [SEED_LINE.replace("0.8.0", f"0.8.{i}") for i in range(5)]
    batches = _batches(tmp_path, HEADER + "\n" + "\n".join(lines) + "\n", block_size=300)
    assert len(batches) > 1  # small blocks: several batches, numbering carries across
    got = [n for b in batches for n in b.lines.tolist()]
    assert got == [2, 3, 4, 5, 6]
    versions = [v for b in batches for v in b.batch.column("liger_version").to_pylist()]
    assert versions == ["0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.8.4"]
    assert batches[0].batch.column("x_value").type == "string"


def test_a_malformed_line_is_reported_with_its_number_and_the_rest_kept(tmp_path: Path) -> None:
    text = HEADER + "\n" + SEED_LINE + "\nonly,three,fields\n" + SEED_LINE + "\n"
    batches = _batches(tmp_path, text)
    assert [m.line for b in batches for m in b.malformed] == [3]
    assert [n for b in batches for n in b.lines.tolist()] == [2, 4]


@pytest.mark.parametrize(
    ("text", "reason"),
    [("", "empty_file"), ("a,b,c\n1,2,3\n", "bad_header")],
    ids=["empty", "not-upstream"],
)
def test_bad_files_are_named(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(BadFile) as err:
        _batches(tmp_path, text)
    assert err.value.reason == reason


def _read(tmp_path: Path, data: bytes, block_size: int = 1 << 20) -> list[tuple[str, int]]:
    (tmp_path / "f.csv").write_bytes(data)
    out: list[tuple[str, int]] = []
    for rb in read_batches(LocalStore(tmp_path), "f.csv", block_size=block_size):
        out += [("row", int(line)) for line in rb.lines]
        out += [("malformed", m.line) for m in rb.malformed]
    return sorted(out, key=lambda x: x[1])


@pytest.mark.parametrize("block_size", [1 << 20, 700, 350])
def test_lines_are_physical_after_blank_lines_quoted_newlines_and_malformed_rows(
    tmp_path, block_size
):
    lines = [HEADER, SEED_LINE, "", TWO_LINE_ROW, "a,b", SEED_LINE, "", "", TWO_LINE_ROW]
    lines += ["x,y,z", SEED_LINE]
    text = "\n".join(lines) + "\n"
    # 1 header, 2 row, 3 blank, 4-5 row, 6 malformed, 7 row, 8-9 blank, 10-11 row,
    # 12 malformed, 13 row: small blocks make Arrow report malformed rows ahead of their batch.
    assert _read(tmp_path, text.encode(), block_size) == [
        ("row", 2),
        ("row", 4),
        ("malformed", 6),
        ("row", 7),
        ("row", 10),
        ("malformed", 12),
        ("row", 13),
    ]


def test_crlf_line_endings_count_once(tmp_path):
    text = "\r\n".join([HEADER, SEED_LINE, TWO_LINE_ROW.replace("\n", "\r\n"), SEED_LINE]) + "\r\n"
    assert _read(tmp_path, text.encode()) == [("row", 2), ("row", 3), ("row", 5)]


def test_many_malformed_rows_across_blocks_keep_every_line(tmp_path):
    body = []
    for i in range(300):
        body.append("too,few" if i % 7 == 3 else SEED_LINE)
    text = "\n".join([HEADER, *body]) + "\n"
    got = _read(tmp_path, text.encode(), block_size=2048)
    assert [line for _, line in got] == list(range(2, 302))
    assert {line for kind, line in got if kind == "malformed"} == {
        i + 2 for i in range(300) if i % 7 == 3
    }


def _bad(tmp_path: Path, data: bytes, block_size: int = 1 << 20) -> BadFile:
    with pytest.raises(BadFile) as caught:
        _read(tmp_path, data, block_size)
    return caught.value


def test_gzip_is_compressed_file_not_bad_header(tmp_path):
    bad = _bad(tmp_path, gzip.compress(f"{HEADER}\n{SEED_LINE}\n".encode()))
    assert bad.reason == "compressed_file" and "gzip" in bad.detail


def test_utf16_is_bad_encoding(tmp_path):
    bad = _bad(tmp_path, f"{HEADER}\n{SEED_LINE}\n".encode("utf-16"))
    assert bad.reason == "bad_encoding" and "UTF-16" in bad.detail


def test_utf16_without_bom_is_bad_encoding(tmp_path):
    assert _bad(tmp_path, f"{HEADER}\n".encode("utf-16-le")).reason == "bad_encoding"


def test_utf8_bom_is_fine(tmp_path):
    assert _read(tmp_path, f"\ufeff{HEADER}\n{SEED_LINE}\n".encode()) == [("row", 2)]


def test_duplicated_header_column_is_bad_header(tmp_path):
    bad = _bad(tmp_path, f"{HEADER},gpu_name\n{SEED_LINE},x\n".encode())
    assert bad.reason == "bad_header" and "gpu_name" in bad.detail


def test_one_huge_line_is_bad_header_not_empty_file(tmp_path):
    bad = _bad(tmp_path, b"x" * (3 << 20))
    assert bad.reason == "bad_header" and "longer than" in bad.detail


def test_a_huge_line_after_the_header_is_line_too_long(tmp_path):
    data = f"{HEADER}\n{SEED_LINE}\n".encode() + b"y" * 5000 + b"\n"
    assert _bad(tmp_path, data, block_size=1024).reason == "line_too_long"


def test_empty_object_is_empty_file(tmp_path):
    assert _bad(tmp_path, b"").reason == "empty_file"


def test_bytes_that_stop_being_utf8_are_bad_encoding(tmp_path):
    good = "\n".join([HEADER] + [SEED_LINE] * 50) + "\n"
    bad = _bad(tmp_path, good.encode() + SEED_LINE.encode().replace(b"H100", b"H\xff00"), 1024)
    assert bad.reason == "bad_encoding"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_malformed_row_that_is_not_utf8_is_bad_encoding(tmp_path):
    data = f"{HEADER}\n{SEED_LINE}\n".encode() + b"a,\xb9b\n" + SEED_LINE.encode() + b"\n"
    assert _bad(tmp_path, data).reason == "bad_encoding"


def test_header_without_upstream_columns_is_bad_header():
    with pytest.raises(BadFile) as caught:
        check_header(b"name,value\nx,1\n")
    assert caught.value.reason == "bad_header" and "kernel_name" in caught.value.detail


def test_symlink_out_of_the_folder_is_unsafe_key(tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_text(f"{HEADER}\n{SEED_LINE}\n")
    root = tmp_path / "up"
    (root / "evil").mkdir(parents=True)
    (root / "evil" / "passwd.csv").symlink_to(secret)
    with pytest.raises(BadFile) as caught:
        list(read_batches(LocalStore(root), "evil/passwd.csv"))
    assert caught.value.reason == "unsafe_key"


@pytest.mark.parametrize(
    ("data", "lines"), [(b"", 1), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"a\n\nb\n", 3)]
)
def test_count_lines(tmp_path, data, lines):
    (tmp_path / "f").write_bytes(data)
    assert count_lines(LocalStore(tmp_path), "f", chunk=2) == lines


@pytest.mark.parametrize(
    ("values", "may_break"),
    [
        (["a", "b"], False),
        (["a\tb", "\x0b\x0c"], False),  # below 14 but no break: the exact look says no
        (["a", "b\nc"], True),
        (["a\rb"], True),
        ([], False),
        ([None, ""], False),
    ],
)
def test_the_quick_line_break_check(values, may_break):
    assert _may_break(pa.array(values, pa.string())) is may_break


def test_a_tab_inside_a_value_is_not_a_line(tmp_path):
    row = SEED_LINE.replace('"{""S"": 4096, ""B"": 1}"', '"{""S"":\t4096, ""B"": 1}"')
    text = "\n".join([HEADER, row, TWO_LINE_ROW, SEED_LINE]) + "\n"
    batches = _batches(tmp_path, text)
    assert [n for b in batches for n in b.lines.tolist()] == [2, 3, 5]
