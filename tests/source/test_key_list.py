"""read_keys: a backfill's key list checked against the table's key columns (pure, no server)."""

from __future__ import annotations

import pytest

from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.key_list import KeyList, key_names_of, read_keys
from airflow_provider_pgsync.testing.destination_kit import column


def test_keys_are_kept_in_order_without_repeats_ints_as_text() -> None:
    keys = read_keys(
        [{"b": "2", "a": 1}, {"a": "1", "b": "2"}, {"a": "3", "b": "x'; --"}], ["a", "b"], "public.t"
    )
    assert keys == KeyList(("a", "b"), (("1", "2"), ("3", "x'; --")))
    assert keys.column(1) == ["2", "x'; --"]


def test_a_table_without_a_key_is_keyed_by_its_whole_row_nulls_allowed() -> None:
    names = key_names_of([column("kind", 25, key=True), column("at", 23, key=True)])
    assert names == ["kind", "at"]
    assert read_keys([{"kind": None, "at": "1"}], names, "public.e", nullable=True).values == ((None, "1"),)
    assert key_names_of([column("id", 23, key=True), column("v", 25)]) == ["id"]


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"id": "1"}, r"backfill_keys of table public.t must be a list of keys.*not dict"),
        ("id=1", r"must be a list of keys.*not str"),
        ([], r"is empty: name at least one key, e\.g\. \[\{\"id\": \"\.\.\.\"\}\]"),
        (["1"], r"key 0 \('1'\): each key is a dict of the key columns"),
        (
            [{"id": "1"}, {"ID": "2"}],
            r"key 1 .*column 'ID' is not a key column of the table; column 'id' is missing",
        ),
        ([{"id": None}], r"key column 'id' is NULL"),
        ([{"id": True}], r"the value of 'id' must be text as PostgreSQL writes it .* not bool"),
        ([{"id": "a\x00b"}], r"holds a NUL character"),
    ],
)
def test_bad_keys_are_refused_naming_the_table_the_key_and_the_remedy(keys: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        read_keys(keys, ["id"], "public.t")


def test_the_number_of_keys_is_bounded() -> None:
    read_keys([{"id": str(i)} for i in range(3)], ["id"], "public.t", limit=3)
    with pytest.raises(ConfigError, match=r"has 4 keys, more than the 3 one backfill takes: split them"):
        read_keys([{"id": str(i)} for i in range(4)], ["id"], "public.t", limit=3)
