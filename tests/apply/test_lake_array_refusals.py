"""An array value the lake cannot hold exactly is refused, in the same words, by the baseline
(its Spark job) and by apply (the lake writer), never stored mangled.

PostgreSQL does not enforce a column's declared dimensions, and keeps an array's lower bounds:
a ``text[]`` column may hold a 2-D value and a ``bigint[]`` one a value indexed from -3. The
lake keeps arrays as Spark arrays of the declared dimensions indexed from 1, so both are refused
(``typemap.spark.array_refusal``); a PostgreSQL replica, which holds them exactly, is not
concerned. Two tables, one refusal each: a baseline stops at its first refusal, apply at its
table's first. Four Spark jobs in all, two at a time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_provider_pgsync.errors import BaselinePartlyFailedError
from airflow_provider_pgsync.operators.apply import PgApplyOperator
from airflow_provider_pgsync.operators.baseline import PgBaselineOperator
from airflow_provider_pgsync.state.phases import Errored, Ready
from airflow_provider_pgsync.typemap.spark import array_refusal
from tests.apply.lake import apply_lake, baseline
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database, MakeReplica
from tests.support.replica import rows

TEXTS, NUMBERS = "public.texts", "public.numbers"
TWO_D = r'{{"a b","\"q\""},{NULL,"NULL"}}'  # a 2-D value in a column declared text[]
SHIFTED = "[-3:-1]={7,NULL,-9223372036854775808}"  # lower bound -3 in a bigint[] column
DDL = [
    "CREATE TABLE texts (id integer PRIMARY KEY, tags text[])",
    "CREATE TABLE numbers (id integer PRIMARY KEY, nums bigint[])",
    # what the lake holds exactly: 1-D values indexed from 1, empty arrays, NULL
    """INSERT INTO texts VALUES (1, '{"a b",NULL,"NULL"}'), (2, '{}'), (3, NULL)""",
    "INSERT INTO numbers VALUES (1, '{7,NULL,-9223372036854775808}'), (2, '{}'), (3, NULL)",
]
REPLICA = {"kind": "postgres", "conn_id": "pgsync_replica", "name": "replica"}
TEXT_REFUSAL = array_refusal(f"column 'tags' of table {TEXTS}", "[1:2][1:2]", 1)
NUMBER_REFUSAL = array_refusal(f"column 'nums' of table {NUMBERS}", "[-3:-1]", 1)


def rebaseline(pipeline: Pipeline, source_conn_id: str, tables: list[str]) -> dict[str, BaseException | None]:
    """Rebaselines (real Spark jobs) of ``tables`` into the test's lake and the PostgreSQL
    destination ``replica``, at once; each one's failure."""

    def run(table: str) -> BaseException | None:
        try:
            PgBaselineOperator(
                task_id="baseline",
                pipeline=pipeline.name,
                table=table,
                postgres_conn_id=source_conn_id,
                destinations=[{"kind": "lake"}, REPLICA],
                state_backend="postgres",
                progress_seconds=2,
                rebaseline=True,
            ).execute({"ti": None})  # type: ignore[typeddict-item]
        except Exception as exc:
            return exc
        return None

    with ThreadPoolExecutor(len(tables)) as pool:
        return dict(zip(tables, pool.map(run, tables), strict=True))


@pytest.mark.slow
def test_baseline_and_apply_refuse_the_same_arrays_in_the_same_words(
    make_pipeline: MakePipeline,
    database: Database,
    source_conn_id: str,
    lake: Path,
    make_replica: MakeReplica,
) -> None:
    replica = make_replica("replica")
    pipeline = make_pipeline(DDL, [TEXTS, NUMBERS])
    baseline(pipeline, source_conn_id, [TEXTS, NUMBERS])  # nothing to refuse yet

    # the values arrive through cdc: apply refuses them, each table Errored with the refusal
    database.execute("INSERT INTO texts VALUES (4, %s::text[])", (TWO_D,))
    database.execute("INSERT INTO numbers VALUES (4, %s::bigint[])", (SHIFTED,))
    assert database.execute("SELECT array_dims(tags) FROM texts WHERE id = 4") == [("[1:2][1:2]",)]
    assert database.execute("SELECT nums::text FROM numbers WHERE id = 4") == [(SHIFTED,)]
    pipeline.capture_until_idle()
    phases = apply_lake(pipeline, lake)
    for table, refusal in ((TEXTS, TEXT_REFUSAL), (NUMBERS, NUMBER_REFUSAL)):
        phase = phases[table]
        assert isinstance(phase, Errored), (table, phase)
        assert phase.reason == refusal
        assert "rebaseline" in phase.solution

    # the remedy, a rebaseline, refuses the same values in the same words instead of storing
    # them mangled (inner arrays as JSON strings, bounds dropped)
    failures = rebaseline(pipeline, source_conn_id, [TEXTS, NUMBERS])
    state = pipeline.state()
    for table, refusal in ((TEXTS, TEXT_REFUSAL), (NUMBERS, NUMBER_REFUSAL)):
        failure = failures[table]
        assert isinstance(failure, BaselinePartlyFailedError), (table, failure)
        assert refusal in str(failure), str(failure)
        phase = state.table(table).destination("lake").phase
        assert isinstance(phase, Errored), (table, phase)
        assert refusal in phase.reason, phase.reason
        # nothing published: the first baseline's base is the only complete one
        bases = lake / "pgsync" / table.replace(".", "__") / "base"
        assert len(list(bases.glob("*/_SUCCESS"))) == 1, sorted(bases.iterdir())

    # the replica holds both values exactly, from the same rebaseline and through apply
    database.execute("UPDATE texts SET tags = %s::text[] WHERE id = 1", (TWO_D,))
    database.execute("INSERT INTO numbers VALUES (5, %s::bigint[])", (SHIFTED,))
    pipeline.capture_until_idle()
    PgApplyOperator(
        task_id="apply",
        pipeline=pipeline.name,
        changelog_uri=pipeline.settings.changelog_uri,
        destinations=[REPLICA],
        postgres_conn_id=source_conn_id,
        state_backend="postgres",
    ).execute({})  # type: ignore[arg-type]
    for table in (TEXTS, NUMBERS):
        assert pipeline.state().table(table).destination("replica").phase == Ready()
        assert rows(replica, table) == rows(database, table)
