"""Apply meets the marker of rows changed outside the stream (a partition attached with rows:
``source/partition_events.py``) into a PostgreSQL replica: a Ready table goes back to baseline
before it (the marker, a ``T`` row, is never applied: the replica keeps its rows); so does a
hand-off whose snapshot did not see it, even when the state gave that baseline the marker's
schema version; a hand-off whose snapshot saw it goes on to Ready, equal to the source."""

from __future__ import annotations

from psycopg import sql

from airflow_provider_pgsync.apply.run import TableApplied, apply_table
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.hooks.ddl_trigger import follow_partitions
from airflow_provider_pgsync.pgoutput import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.phases import DataSync, Init, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database
from tests.support.replica import apply_all, empty_capture_baseline, rows

PT = "public.pt"


def _snapshot(database: Database) -> tuple[int, int, LSN]:
    xmin, xmax, lsn = database.execute(
        "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,"
        " pg_current_wal_insert_lsn()::text FROM pg_current_snapshot() s"
    )[0]
    return int(str(xmin)), int(str(xmax)), LSN.parse(str(lsn))


def _apply(pipeline: Pipeline, replica: Database) -> TableApplied:
    """One apply run of pt into the replica; its phase recorded."""
    state = pipeline.state()
    destination = PostgresDestination(replica.conninfo, name="replica")
    try:
        changelog = Changelog(pipeline.settings.changelog_uri)
        result = apply_table(changelog, state, state.table(PT), destination, batch_rows=7)
    finally:
        destination.close()
    if result.phase != state.table(PT).phase:
        update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(PT, result.phase))
    return result


def _baselined(pipeline: Pipeline, database: Database, replica: Database, done: SyncDone) -> None:
    """The replica's table holds the source's rows now, and the state ``done`` (a baseline)."""
    replica.execute("DELETE FROM pgsync.watermarks WHERE table_key = 'public.pt'")
    replica.execute("TRUNCATE public.pt")
    with database.connect() as source, replica.connect() as out:
        ident = TableRef.parse(PT).identifier
        with (
            out.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(ident)) as sink,
            source.cursor().copy(sql.SQL("COPY (SELECT * FROM {}) TO STDOUT").format(ident)) as data,
        ):
            for block in data:
                sink.write(block)
    if pipeline.state().table(PT).phase != Init():
        update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(PT, Init()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(PT, DataSync()))
    update_state(pipeline.store, pipeline.name, lambda s: s.with_table_phase(PT, done))


def test_a_marker_sends_the_table_back_to_baseline_unless_the_baseline_saw_it(
    make_pipeline: MakePipeline, database: Database, replica: Database
) -> None:
    pipeline = make_pipeline(
        [
            "CREATE TABLE public.pt (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)",
            "CREATE TABLE public.pt_1 PARTITION OF public.pt FOR VALUES FROM (0) TO (100)",
        ],
        [PT],
    )
    with pipeline.hook.connect() as conn:
        follow_partitions(conn, [TableRef.parse(PT)])
    empty_capture_baseline(pipeline, database, PT)
    database.execute("INSERT INTO public.pt SELECT g, 'v' || g FROM generate_series(1, 50) g")
    pipeline.capture_until_idle()
    assert apply_all(pipeline, replica) == {PT: Ready()}
    before_attach = _snapshot(database)
    database.execute("CREATE TABLE public.pt_2 (v text, id int NOT NULL)")
    database.execute("INSERT INTO public.pt_2 VALUES ('brought', 150)")
    database.execute("ALTER TABLE public.pt ATTACH PARTITION public.pt_2 FOR VALUES FROM (100) TO (200)")
    database.execute("INSERT INTO public.pt VALUES (151, 'after')")
    pipeline.capture_until_idle()
    assert pipeline.state().table(PT).schema_version == 1

    # Ready: back to baseline at the marker, nothing of it applied (the replica keeps its rows)
    held = rows(replica, PT)
    result = _apply(pipeline, replica)
    assert result.phase == Init() and result.applied == 0
    assert result.schema_change is not None
    assert result.schema_change.startswith("table public.pt: partition public.pt_2 attached with rows")
    assert rows(replica, PT) == held and len(held) == 50

    # a baseline from before the ATTACH, given the marker's version all the same: back to baseline
    xmin, xmax, lsn = before_attach
    blind = SyncDone("00000003-00000002-1", lsn, xmin, xmax, schema_version=1)
    _baselined(pipeline, database, replica, blind)
    replica.execute("DELETE FROM public.pt WHERE id >= 100")  # as that snapshot saw the table
    assert _apply(pipeline, replica).phase == Init()
    assert len(rows(replica, PT)) == 50

    # a baseline that saw it: the hand-off goes on, the marker is in its base
    for version in (0, 1):  # whichever version the state gave it
        xmin, xmax, lsn = _snapshot(database)
        done = SyncDone("00000003-00000002-1", lsn, xmin, xmax, schema_version=version)
        _baselined(pipeline, database, replica, done)
        database.execute("INSERT INTO public.pt VALUES (%s, 'later')", (160 + version,))
        pipeline.capture_until_idle()
        assert _apply(pipeline, replica).phase == Ready()
        assert rows(replica, PT) == rows(database, PT)
