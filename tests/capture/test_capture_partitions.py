"""Capture of a partitioned table published via its root (``source/partition_events.py``).

pgoutput sends a leaf partition's Relation beside its root's and every change under the root's
OID; no change at all for the rows an ATTACH brings or a DETACH, a DROP or a TRUNCATE of a
partition takes. Capture follows the table as one, and turns each of the latter into a new
schema version whose first row is a marker and whose change says why (``SchemaChange.outside``),
exactly where it happened in the stream; a new or an empty partition changes nothing.
"""

from __future__ import annotations

from airflow_provider_pgsync.changelog.metadata import change_of
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.hooks.ddl_trigger import follow_partitions
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import SchemaChange
from tests.capture.conftest import MakePipeline
from tests.conftest import Database

PT = "public.pt"
DDL = [
    "CREATE TABLE public.pt (id int PRIMARY KEY, a text, b int) PARTITION BY RANGE (id)",
    "CREATE TABLE public.pt_1 PARTITION OF public.pt FOR VALUES FROM (0) TO (100)",
    # a sub-partitioned partition, and a leaf whose columns are in another order
    "CREATE TABLE public.pt_2 PARTITION OF public.pt FOR VALUES FROM (100) TO (200) PARTITION BY RANGE (id)",
    "CREATE TABLE public.pt_2a PARTITION OF public.pt_2 FOR VALUES FROM (100) TO (200)",
    "CREATE TABLE public.pt_9 (b int, a text, id int NOT NULL)",
    "ALTER TABLE public.pt ATTACH PARTITION public.pt_9 FOR VALUES FROM (900) TO (1000)",
    "CREATE TABLE public.pt_d PARTITION OF public.pt DEFAULT",
]


def _started(pipeline_changes: list[dict[str, object]]) -> dict[int, list[dict[str, object]]]:
    by_version: dict[int, list[dict[str, object]]] = {}
    for change in pipeline_changes:
        by_version.setdefault(int(change["_schema_version"]), []).append(change)  # type: ignore[call-overload]
    return by_version


def test_a_partitioned_table_streams_as_one_and_rows_outside_the_stream_start_versions(
    database: Database, make_pipeline: MakePipeline
) -> None:
    pipeline = make_pipeline(DDL, [PT])
    with pipeline.hook.connect() as conn:
        assert follow_partitions(conn, [TableRef("public", "pt")]) == [TableRef("public", "pt")]
    # every leaf's changes, under the root's columns (pt_9 has them in another order)
    database.execute(
        "INSERT INTO public.pt VALUES (1, 'one', 1), (150, 'sub', 2), (950, 'nine', 3), (5000, 'dflt', 4)"
    )
    database.execute("UPDATE public.pt SET a = 'NINE' WHERE id = 950")
    # none of these changes a row outside the stream: no new version
    database.execute("CREATE TABLE public.pt_3 PARTITION OF public.pt FOR VALUES FROM (300) TO (400)")
    database.execute("CREATE TABLE public.pt_4 (LIKE public.pt)")
    database.execute("ALTER TABLE public.pt ATTACH PARTITION public.pt_4 FOR VALUES FROM (400) TO (500)")
    database.execute("INSERT INTO public.pt VALUES (350, 'new', 5), (450, 'attached empty', 6)")
    database.execute("DELETE FROM public.pt WHERE id = 450")
    database.execute("ALTER TABLE public.pt DETACH PARTITION public.pt_4")  # empty again
    database.execute(
        "TRUNCATE public.pt"
    )  # the root's own TRUNCATE streams; its leaves' triggers stay silent
    database.execute("INSERT INTO public.pt VALUES (2, 'two', 7)")
    pipeline.capture_until_idle()
    changes = pipeline.changes(PT)
    assert {int(c["_schema_version"]) for c in changes} == {0}
    assert [(c["_op"], c["id"], c["a"], c["b"]) for c in changes] == [
        ("I", "1", "one", "1"),
        ("I", "150", "sub", "2"),
        ("I", "950", "nine", "3"),
        ("I", "5000", "dflt", "4"),
        ("U", "950", "NINE", "3"),
        ("I", "350", "new", "5"),
        ("I", "450", "attached empty", "6"),
        ("D", None, None, None),  # (its key is in _old_key_id)
        ("T", None, None, None),
        ("I", "2", "two", "7"),
    ]
    # a table with rows attached (its columns in another order), in a transaction with changes
    # before and after it: they fall on either side of the marker
    database.execute("CREATE TABLE public.pt_5 (b int, a text, id int NOT NULL)")
    database.execute("INSERT INTO public.pt_5 VALUES (8, 'brought', 550)")
    database.transaction(
        "INSERT INTO public.pt VALUES (3, 'before', 9)",
        "ALTER TABLE public.pt ATTACH PARTITION public.pt_5 FOR VALUES FROM (500) TO (600)",
        "INSERT INTO public.pt VALUES (560, 'after', 10)",
    )
    database.execute("INSERT INTO public.pt VALUES (360, 'in pt_3', 12)")
    database.execute("ALTER TABLE public.pt DETACH PARTITION public.pt_3")  # with a row
    database.execute("TRUNCATE public.pt_2")  # a sub-partitioned partition: its leaf pt_2a is reported
    database.execute("INSERT INTO public.pt_5 VALUES (11, 'later', 570)")  # the new leaf streams
    database.execute("DROP TABLE public.pt_1")
    pipeline.capture_until_idle()
    by_version = _started(pipeline.changes(PT))
    assert sorted(by_version) == [0, 1, 2, 3, 4]
    assert [(c["_op"], c["id"]) for c in by_version[0][-2:]] == [("I", "2"), ("I", "3")]
    assert [(c["_op"], c["id"], c["a"]) for c in by_version[1]] == [
        ("T", None, None),
        ("I", "560", "after"),
        ("I", "360", "in pt_3"),
    ]
    assert [(c["_op"], c["id"]) for c in by_version[2]] == [("T", None)]
    assert [(c["_op"], c["id"], c["a"]) for c in by_version[3]] == [("T", None, None), ("I", "570", "later")]
    assert [(c["_op"], c["id"]) for c in by_version[4]] == [("T", None)]
    # each version's change says why, in the segments (what apply reads) and nowhere else
    reasons: dict[int, SchemaChange] = {}
    changelog = Changelog(pipeline.settings.changelog_uri)
    for seg in pipeline.state().segments:  # in order: each version's first segment keeps its change
        reasons.setdefault(seg.schema_version, change_of(changelog.segment_metadata(seg.path), seg.path))
    assert reasons[0] == SchemaChange()
    assert reasons[1].outside == "partition public.pt_5 attached with rows: they are not in the stream"
    assert (
        reasons[2].outside == "partition public.pt_3 detached: the removal of its rows is not in the stream"
    )
    assert reasons[3].outside.startswith("partition public.pt_2a truncated: the removal of its rows")
    assert reasons[4].outside == "partition public.pt_1 dropped: the removal of its rows is not in the stream"
    assert all(reasons[v].xids for v in (1, 2, 3, 4))
    table = pipeline.state().table(PT)
    assert table.schema_version == 4
    assert [c.name for c in table.columns] == ["id", "a", "b"]
