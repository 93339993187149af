"""One source for every field list: the runs schema says which columns a descriptor fixes."""

from __future__ import annotations

import pyarrow as pa

from kindex_etl.catalog import default_catalog
from kindex_etl.contracts.tables import (
    DESCRIPTOR_FIELDS,
    DICTIONARY_FIELDS,
    RUN_SCHEMA,
    RUN_WRITE_SCHEMA,
)
from kindex_etl.normalize.columnar import descriptor_values
from kindex_etl.normalize.descriptors import Resolver
from kindex_etl.normalize.reference import descriptor_key
from tests.helpers import seed_row


def test_descriptor_values_give_exactly_the_descriptor_columns() -> None:
    d = Resolver(default_catalog()).resolve(descriptor_key(seed_row()))
    values = descriptor_values(d)
    assert tuple(values) == DESCRIPTOR_FIELDS
    for name, value in values.items():
        pa.array([value], RUN_SCHEMA.field(name).type)  # each value fits its column's type


def test_write_schema_differs_only_by_dictionary_encoding() -> None:
    assert RUN_WRITE_SCHEMA.names == RUN_SCHEMA.names
    for f in RUN_SCHEMA:
        written = RUN_WRITE_SCHEMA.field(f.name)
        if f.name in DICTIONARY_FIELDS:
            assert written.type == pa.dictionary(pa.int32(), pa.string())
        else:
            assert written.type == f.type
    assert "external_id" not in DESCRIPTOR_FIELDS and "series_id" in DESCRIPTOR_FIELDS
