"""One text per value: a row as the baseline wrote it equals the same row re-sent by capture,
in the lake and in a PostgreSQL replica, for every type of DESIGN §6 and of docs/destinations.md's type
table (the ``all_types`` table of ``tests/baseline/test_baseline_types.py``: xml, ranges,
composites with dates, timestamps, xml and jsonb fields, dates before the year 1 and after 9999).

One Spark job baselines the table into both destinations; then every row is updated to itself,
so capture sends each row whole (pgoutput's text of every column) and apply writes it over the
baseline's. The lake's view (the captured rows) is joined with its base (the baseline's rows)
and compared column by column; the replica's rows are compared with themselves before.
"""

# The statements are built from the module's constants and the table's column names.
# ruff: noqa: S608

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_pgsync.apply.destination import Destination
from airflow_provider_pgsync.apply.run import apply_table
from airflow_provider_pgsync.changelog.segments import Changelog
from airflow_provider_pgsync.destinations.lake import LakeDestination
from airflow_provider_pgsync.destinations.lake_changes import LakeChanges
from airflow_provider_pgsync.destinations.postgres import PostgresDestination
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import Ready
from airflow_provider_pgsync.state.store import update_state
from tests.apply.lake import lake_session
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database
from tests.support.all_types import ANCIENT_ID, create_all_types
from tests.support.replica import column_names, rows

TABLE = "public.all_types"


def apply_to(pipeline: Pipeline, destination: Destination) -> tuple[object, int]:
    """One apply run of the table into ``destination`` (closed after), its phase recorded for
    that destination alone; the phase and the number of changes applied."""
    state = pipeline.state()
    try:
        changelog = Changelog(pipeline.settings.changelog_uri)
        result = apply_table(changelog, state, state.tables[TABLE], destination)
    finally:
        destination.close()

    def record(current: PipelineState) -> PipelineState:
        if result.phase == current.tables[TABLE].destination(destination.name).phase:
            return current
        return current.with_destination_phase(TABLE, destination.name, result.phase)

    update_state(pipeline.store, pipeline.name, record)
    return result.phase, result.applied


@pytest.mark.slow
def test_a_row_resent_by_capture_equals_the_baselines(
    make_pipeline: MakePipeline,
    database: Database,
    replica: Database,
    replica_conn_id: str,
    source_conn_id: str,
    lake: Path,
) -> None:
    create_all_types(database)
    pipeline = make_pipeline([], [TABLE])
    postgres = {"kind": "postgres", "conn_id": replica_conn_id, "name": "replica"}
    PgBaselineOperator(
        task_id="baseline",
        pipeline=pipeline.name,
        table=TABLE,
        postgres_conn_id=source_conn_id,
        destinations=[{"kind": "lake"}, postgres],
        state_backend="postgres",
        progress_seconds=2,
    ).execute({"ti": None})  # type: ignore[typeddict-item]
    baselined = rows(replica, TABLE)
    count = len(baselined)
    assert count == ANCIENT_ID  # rows 1 to 7, the ancient one included

    database.execute("UPDATE all_types SET id = id")  # every row sent again, every column whole
    pipeline.capture_until_idle()
    lake_destination = LakeChanges(LakeDestination.from_config({"warehouse": str(lake)}))
    assert apply_to(pipeline, lake_destination) == (Ready(), count)
    assert apply_to(pipeline, PostgresDestination(replica.conninfo, name="replica")) == (Ready(), count)

    # the replica: each row's text, column by column, as the baseline's COPY left it
    captured = rows(replica, TABLE)
    names = column_names(database, TABLE)
    differing = {
        (before[names.index("id")], name)
        for before, after in zip(baselined, captured, strict=True)
        for name, b, a in zip(names, before, after, strict=True)
        if a != b
    }
    assert differing == set()

    # the lake: the view (the captured rows) against its base (the baseline's)
    checks = ", ".join(f"IF({_same(n)}, NULL, '{n}')" for n in names if n != "id")
    query = (
        f"SELECT a.id, concat_ws(',', {checks}) FROM pgsync.public__all_types a"
        " JOIN pgsync.public__all_types__base b ON b.id = a.id ORDER BY a.id"
    )
    (found,) = lake_session(lake, [{"sql": query}])
    assert [id_ for id_, _ in found] == list(range(1, count + 1))
    assert {id_: cols for id_, cols in found if cols} == {}


def _same(name: str) -> str:
    a, b = f"a.`{name}`", f"b.`{name}`"
    if name == "c_hstore":  # maps do not compare: their sorted entries do
        return f"array_sort(map_entries({a})) <=> array_sort(map_entries({b}))"
    return f"{a} <=> {b}"
