"""Every type of DESIGN §6 through the lake's apply: rows copied after the baseline travel as
pgoutput text, are typed by ``destinations/lake_values.py`` and read back through the view
equal to the rows the baseline wrote (the source database has unusual DateStyle, TimeZone,
IntervalStyle and float settings, which capture must not pass on)."""

# The statements are built from the module's constants and the table's column names.
# ruff: noqa: S608

from __future__ import annotations

from pathlib import Path

from airflow_provider_pgsync.state.phases import Ready
from tests.apply.lake import apply_lake, baseline, lake_session
from tests.capture.conftest import MakePipeline
from tests.conftest import Database
from tests.support.all_types import ANCIENT_ID, create_all_types
from tests.support.replica import column_names

TABLE = "public.all_types"
SHIFT = 100


def test_changes_read_back_as_the_baseline_wrote_them(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    create_all_types(database)
    pipeline = make_pipeline([], [TABLE])
    baseline(pipeline, source_conn_id, [TABLE])
    database.transaction(  # every row again under another id, now as changes
        f"CREATE TEMP TABLE copied AS SELECT * FROM all_types WHERE id <> {ANCIENT_ID}",
        f"UPDATE copied SET id = id + {SHIFT}",
        "INSERT INTO all_types SELECT * FROM copied",
    )
    pipeline.capture_until_idle()
    assert apply_lake(pipeline, lake) == {TABLE: Ready()}

    names = [n for n in column_names(database, TABLE) if n != "id"]
    checks = ", ".join(f"IF({_same(n)}, NULL, '{n}')" for n in names)
    view = "pgsync.public__all_types"
    query = (
        f"SELECT a.id, concat_ws(',', {checks}) FROM {view} a"
        f" JOIN {view} b ON b.id = a.id + {SHIFT} ORDER BY a.id"
    )
    (found,) = lake_session(lake, [{"sql": query}])
    with database.connect() as conn:
        copied = conn.execute(f"SELECT count(*) FROM all_types WHERE id > {SHIFT}").fetchone()
    assert copied is not None and len(found) == copied[0] > 0
    differing = {id_: set(cols.split(",")) - {""} for id_, cols in found}
    assert {i: c for i, c in differing.items() if c} == {}


def _same(name: str) -> str:
    a, b = f"a.`{name}`", f"b.`{name}`"
    if name == "c_hstore":  # maps do not compare: their sorted entries do
        return f"array_sort(map_entries({a})) <=> array_sort(map_entries({b}))"
    return f"{a} <=> {b}"
