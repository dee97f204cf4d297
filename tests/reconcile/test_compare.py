"""The pure logic of reconciliation: canonical texts, bucket bisection, classification, the
result's JSON, when a destination may be compared."""

from __future__ import annotations

import datetime as dt
import decimal
import random

import pyarrow as pa
import pytest

from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.reconcile.canonical import (
    arrow_texts,
    hash_number,
    md5_hex,
    parse_row_text,
    row_text,
)
from airflow_provider_pgsync.reconcile.compare import (
    Aggregate,
    MemorySide,
    RowDigest,
    classify,
    compare,
    differing,
    levels,
)
from airflow_provider_pgsync.reconcile.result import ReconcileResult, TableResult, key_dict
from airflow_provider_pgsync.reconcile.wait import not_caught_up, not_ready
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import DataSync, Init, Ready, SyncDone
from airflow_provider_pgsync.state.segment import SegmentInfo


@pytest.mark.parametrize(
    "values",
    [[], [None], [""], ["a,b", None, "3:x", "N"], ["é" * 3, "\n", ",,"], [None, None]],
)
def test_row_text_parses_back(values: list[str | None]) -> None:
    assert parse_row_text(row_text(values)) == values


def test_row_texts_of_different_rows_differ() -> None:
    assert row_text(["a", "b"]) != row_text(["a,b"]) != row_text(["ab"])
    assert row_text([None]) != row_text(["N"]) != row_text([""])


def test_md5_is_postgresql_md5_of_utf8() -> None:
    assert md5_hex("") == "d41d8cd98f00b204e9800998ecf8427e"  # SELECT md5('')
    assert hash_number("f" * 32) == 2**60 - 1


def test_arrow_texts_do_not_depend_on_the_readers_time_zone() -> None:
    instant = dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC)
    utc = pa.array([instant, None], pa.timestamp("us", tz="UTC"))
    berlin = utc.cast(pa.timestamp("us", tz="Europe/Berlin"))
    assert arrow_texts(utc) == arrow_texts(berlin) == ["1704103200000000", None]
    assert arrow_texts(pa.array([-0.0, 1.5, float("nan")])) == ["0.0", "1.5", "NaN"]
    assert arrow_texts(pa.array([True, False])) == ["t", "f"]
    assert arrow_texts(pa.array([b"\x01\xff"])) == ["\\x01ff"]
    assert arrow_texts(pa.array([decimal.Decimal("1.50")], pa.decimal128(10, 2))) == ["1.50"]
    nested = pa.array([[1, None], None], pa.list_(pa.int32()))
    assert arrow_texts(nested) == ["[1,null]", None]
    kind = pa.struct([("a", pa.int8()), ("t", pa.timestamp("us", "UTC"))])
    structs = pa.array([{"a": 1, "t": instant}], kind)
    assert arrow_texts(structs) == ['{"a":1,"t":"2024-01-01T10:00:00"}']


def _rows(count: int, seed: int = 1) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    found = []
    for i in range(count):
        key = row_text([str(i)])
        found.append((key, md5_hex(key), md5_hex(row_text([str(i), str(rng.random())]))))
    return found


def test_levels_leave_small_buckets_last() -> None:
    assert levels(0) == [3]
    assert levels(4096 * 2000) == [3]
    assert levels(4096 * 2000 + 1) == [3, 5]
    assert levels(10**9) == [3, 5]
    assert levels(16**5 * 2000 + 1) == [3, 5, 7]


def test_equal_sides_compare_at_the_first_level_only() -> None:
    rows = _rows(5000)
    found = compare(MemorySide(rows), MemorySide(list(reversed(rows))), [3, 5], keyed=True)
    assert found.equal and found.source_rows == 5000 and found.rows_fetched == 0


def test_differences_are_classified_exactly_and_only_their_buckets_fetched() -> None:
    rows = _rows(20000)
    theirs = [r for r in rows if r[0] != row_text(["5"])]  # missing
    changed = row_text(["6"])
    theirs = [(k, kh, md5_hex("other") if k == changed else rh) for k, kh, rh in theirs]
    stray = row_text(["900000"])
    theirs.append((stray, md5_hex(stray), md5_hex("x")))  # extra
    found = compare(MemorySide(rows), MemorySide(theirs), [3, 5], keyed=True)
    assert (found.missing, found.extra, found.different) == ((row_text(["5"]),), (stray,), (changed,))
    assert found.rows_fetched < 20  # three buckets of 16^5, not the table


def test_a_multiset_counts_copies() -> None:
    one, two = row_text(["a", "1"]), row_text(["b", "2"])
    ours = [RowDigest(one, md5_hex(one))] * 3 + [RowDigest(two, md5_hex(two))]
    theirs = [RowDigest(one, md5_hex(one))] + [RowDigest(two, md5_hex(two))] * 2
    assert classify(ours, theirs, keyed=False) == ((one, one), (two,), ())
    memory = [(r.key, md5_hex(r.key), r.row_md5) for r in ours]
    other = [(r.key, md5_hex(r.key), r.row_md5) for r in theirs]
    found = compare(MemorySide(memory), MemorySide(other), [3], keyed=False)
    assert (found.missing, found.extra) == ((one, one), (two,))


def test_differing_buckets_include_one_sided_ones() -> None:
    a, b = Aggregate(1, 5), Aggregate(2, 5)
    assert differing({"abc": a, "abd": a}, {"abc": a, "abd": b, "abe": a}) == ["abd", "abe"]


def test_the_result_json_keeps_its_shape() -> None:
    found = compare(
        MemorySide(_rows(10)), MemorySide(_rows(10)[1:]), [3], keyed=True
    )
    table = TableResult.from_differences("public.t", "lake", found, ["id"], left_out=2, sample_size=5)
    result = ReconcileResult("0/10", "2026-01-01T00:00:00+00:00", (table,))
    assert result.to_json() == {
        "snapshot_lsn": "0/10",
        "finished_at": "2026-01-01T00:00:00+00:00",
        "tables": [
            {
                "table": "public.t",
                "destination": "lake",
                "status": "different",
                "source_rows": 10,
                "left_out": 2,
                "missing": 1,
                "extra": 0,
                "different": 0,
                "samples": {"missing": [{"id": "0"}], "extra": [], "different": []},
                "repair": "none",
                "reason": "",
            }
        ],
    }
    assert table.keys == ({"id": "0"},)
    assert key_dict(["a", "b"], row_text(["x", None])) == {"a": "x", "b": None}
    assert result.failed == (table,)


def _segment(table: str, lsn: int) -> SegmentInfo:
    return SegmentInfo(f"s{lsn}", table, 1, LSN(lsn), LSN(lsn), 10, 10, 1, 64)


def test_a_destination_is_compared_once_it_applied_what_the_snapshot_saw() -> None:
    state = PipelineState("p").with_table_phase("public.t", Init())
    state = state.with_table_phase("public.t", DataSync()).with_table_phase(
        "public.t", SyncDone("s", LSN(1), 1, 1)
    ).with_table_phase("public.t", Ready())
    assert not_ready(state, "public.t", "lake") is None
    assert "not in pipeline" in (not_ready(state, "public.x", "lake") or "")
    behind = PipelineState("p", last_end_lsn=LSN(50), segments=(_segment("public.t", 40),))
    assert "capture has reached 0/32" in (not_caught_up(behind, "public.t", "lake", LSN(60), (40, 0)) or "")
    assert "apply has reached 0/1E" in (not_caught_up(behind, "public.t", "lake", LSN(45), (30, 0)) or "")
    assert not_caught_up(behind, "public.t", "lake", LSN(45), (40, 2)) is None
    assert not_caught_up(behind, "public.u", "lake", LSN(45), None) is None
    init = PipelineState("p").with_table_phase("public.t", Init())
    assert "Init in destination lake, not Ready" in (not_ready(init, "public.t", "lake") or "")
