"""The data dictionary covers every column of every table, and docs/tables.md is its rendering."""

from __future__ import annotations

from kindex_etl.cli.commands import all_tables
from kindex_etl.contracts.dictionary import markdown, table_schemas
from kindex_etl.load.layout import TABLES
from tests.helpers import REPO


def test_every_table_and_column_is_described():
    assert set(all_tables()) == set(TABLES)
    missing = [
        f"{t}.{c['name']}"
        for t, spec in table_schemas(all_tables()).items()
        for c in spec["columns"]
        if not c["description"]
    ]
    assert missing == []


def test_descriptions_name_only_existing_columns():
    import json

    from kindex_etl.contracts import dictionary

    data = json.loads((REPO / "kindex_etl" / "contracts" / "columns.json").read_text())
    for table, described in data.items():
        names = set(all_tables()[table].names) | {dictionary._UPSTREAM}
        assert set(described) <= names, table


def test_docs_tables_md_is_the_generated_dictionary():
    assert (REPO / "docs" / "tables.md").read_text() == markdown(all_tables())


def test_no_timestamp_is_text():
    # Raw upstream columns stay verbatim (replay needs them); everything else is typed.
    for table, schema in all_tables().items():
        for f in schema:
            if f.name.endswith("_at") or (f.name == "timestamp" and table != "quarantine/rows"):
                assert str(f.type).startswith("timestamp"), (table, f.name)
