"""Hostile backfill filters against a real PostgreSQL (and, marked slow, real Spark jobs): the
issue's attacks, statements joined by ';', side-effect functions, NUL bytes, very long texts.
Each is refused with a message naming the filter and the table, or gives the right rows; none
executes anything: the canary table survives, no large object appears, the sequence stays put.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from airflow_provider_pgsync.errors import BaselineError, ConfigError
from airflow_provider_pgsync.operators.backfill import PgBackfillOperator, explain
from airflow_provider_pgsync.state.model import DataSync, PipelineState, Ready, SyncDone
from airflow_provider_pgsync.state.store import update_state
from tests.capture.conftest import MakePipeline, Pipeline
from tests.conftest import Database

TABLE = "public.items"
SETUP = [
    "CREATE TABLE items (id int PRIMARY KEY, name text, price float8)",  # every column on the Arrow path
    "INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 50) g",
    "CREATE TABLE x (v int)",  # the canary
    "INSERT INTO x VALUES (1)",
    "CREATE SEQUENCE s",
    # declared STABLE (wrongly) so the VOLATILE check lets it through: the read-only reads stop it
    "CREATE FUNCTION sneaky() RETURNS boolean STABLE LANGUAGE sql AS $$ SELECT nextval('s') > 0 $$",
]
ATTACK = "id > 0) ; COMMIT; DROP TABLE x; --"


def _harm(database: Database) -> dict[str, Any]:
    """What an attack could change: the canary, large objects, the sequence."""
    [(canary,)] = database.execute("SELECT to_regclass('public.x') IS NOT NULL")
    [(objects,)] = database.execute("SELECT count(*) FROM pg_largeobject_metadata")
    [(called,)] = database.execute("SELECT is_called FROM s")
    return {"canary": canary, "large objects": objects, "sequence used": called}


UNHARMED = {"canary": True, "large objects": 0, "sequence used": False}


def _ready(pipeline: Pipeline) -> PipelineState:
    def ready(state: PipelineState) -> PipelineState:
        done = SyncDone("snap", pipeline.creation_lsn, 1, 1)
        return (
            state.with_table_phase(TABLE, DataSync())
            .with_table_phase(TABLE, done)
            .with_table_phase(TABLE, Ready())
        )

    update_state(pipeline.store, pipeline.name, ready)
    return pipeline.state()


def _backfill(pipeline: Pipeline, conn_id: str, condition: object, grammar: str, **kwargs: Any) -> Any:
    return PgBackfillOperator(
        task_id="backfill",
        pipeline=pipeline.name,
        table=TABLE,
        backfill_filter=condition,  # type: ignore[arg-type]
        filter_grammar=grammar,
        postgres_conn_id=conn_id,
        state_backend="postgres",
        progress_seconds=2,
        **kwargs,
    ).execute({"ti": None})  # type: ignore[typeddict-item]


def test_the_issues_attack_ran_through_the_old_check(database: Database) -> None:
    """Why: the check pasted the filter into a statement run with the simple query protocol."""
    for statement in SETUP:
        database.execute(statement)
    with database.connect(autocommit=False) as conn:
        conn.read_only = True
        conn.execute("SELECT 1")  # the snapshot's transaction: the check ran in a savepoint of it
        old_check = sql.SQL("EXPLAIN SELECT FROM items WHERE ({})").format(sql.SQL(ATTACK))
        with pytest.raises(psycopg.Error), conn.transaction():  # the task then failed, after the damage
            conn.execute(old_check)
    assert _harm(database)["canary"] is False, "this test no longer shows the attack it guards against"


def test_the_check_runs_one_statement_only_whatever_the_text(database: Database) -> None:
    """The server path on its own, without the tokenizer: ``explain`` runs prepared (extended
    query protocol), which refuses a text with a second statement before running any of it."""
    for statement in SETUP:
        database.execute(statement)
    with database.connect(autocommit=False) as conn:
        with pytest.raises(
            psycopg.errors.SyntaxError, match="cannot insert multiple commands into a prepared"
        ):
            explain(conn, sql.SQL("EXPLAIN SELECT FROM items WHERE (id > 0); COMMIT; DROP TABLE x; --)"))
        conn.rollback()
        with pytest.raises(psycopg.errors.SyntaxError, match="cannot insert multiple commands"):
            explain(conn, sql.SQL("SELECT lo_create(0); SELECT nextval('s')"))
    assert _harm(database) == UNHARMED


@pytest.mark.parametrize("grammar", ["safe", "sql"])
@pytest.mark.parametrize(
    ("condition", "problem"),
    [
        (ATTACK, r"at character 7 .*'\)' closes no '\(' of the filter"),
        ("id > 0; DROP TABLE x", r"';' is not allowed: a filter is one expression, not statements"),
        ("id > 0 OR (SELECT lo_create(0)) > 0 -- ", r"a comment \(--\) is not allowed"),
        ("id > 0) OR (lo_create(0) > 0", r"'\)' closes no '\('"),
        ("name = 'x\\'; SELECT nextval('s'); --'", r"';' is not allowed"),
        ("name = $$x$$ ; DROP TABLE x; --$$", r"';' is not allowed"),
        ("id > 0\x00; DROP TABLE x", r"contains a NUL character \(at character 7\)"),
        ("id = $1", r"a parameter \(\$1\) is not allowed"),
        ("x" * 1_000_001, r"1,000,001 characters is longer than the 1,000,000 allowed"),
    ],
)
def test_hostile_filters_are_refused_before_anything_runs(
    make_pipeline: MakePipeline,
    database: Database,
    source_conn_id: str,
    lake: Path,
    grammar: str,
    condition: str,
    problem: str,
) -> None:
    pipeline = make_pipeline(SETUP, [TABLE])
    state = _ready(pipeline)
    with pytest.raises(ConfigError, match=rf"^backfill_filter of table public.items: .*{problem}"):
        _backfill(pipeline, source_conn_id, condition, grammar)
    assert _harm(database) == UNHARMED
    assert pipeline.state() == state
    assert not any(lake.glob("**/backfill/*")), "a refused backfill staged rows"


@pytest.mark.parametrize(
    ("grammar", "condition", "problem"),
    [
        ("safe", "lo_create(0) > 0", r"only plain columns of the table are allowed after 'lo_create'"),
        ("safe", "nextval('s') > 0", r"only plain columns .* after 'nextval'"),
        (
            "safe",
            "idd > 1 AND \"Name\" = 'x'",
            r"table public.items has no column 'idd', 'Name'; its columns: id, name, price",
        ),
        (
            "safe",
            "id = 'abc'",
            r"is not a condition on table public.items: invalid input syntax for type integer",
        ),
        ("safe", "name", r"argument of WHERE must be type boolean"),
        (
            "sql",
            "lo_create(0) > 0",
            r"calls 'lo_create', which PostgreSQL marks VOLATILE .* not allowed in a filter",
        ),
        (
            "sql",
            'id > 0 AND "pg_catalog" . "lo_create" (0) > 0',
            r"calls 'lo_create', which PostgreSQL marks VOLATILE",
        ),
        ("sql", "nextval('s') > 0", r"calls 'nextval'"),
        ("sql", "query_to_xml('SELECT lo_create(0)', true, true, '') IS NOT NULL", r"calls 'query_to_xml'"),
        (
            "sql",
            "pg_advisory_lock(1) IS NULL OR pg_drop_replication_slot('s') IS NULL",
            r"calls 'pg_advisory_lock', 'pg_drop_replication_slot'",
        ),
        ("sql", "set_config('transaction_read_only', 'off', true) = 'off'", r"calls 'set_config'"),
        ("sql", "EXISTS (SELECT lo_from_bytea(0, 'x'))", r"calls 'lo_from_bytea'"),
        ("sql", "idd > 1", r"is not a condition on table public.items: column \"idd\" does not exist"),
        ("sql", "id + 1", r"argument of WHERE must be type boolean, not type integer"),
        ("sql", "id > (SELECT 1, 2)", r"subquery must return only one column"),
        ("safe", 7, r"must be text, not int"),
    ],
)
def test_filters_the_server_or_the_grammar_refuses_name_the_problem(
    make_pipeline: MakePipeline,
    database: Database,
    source_conn_id: str,
    grammar: str,
    condition: Any,
    problem: str,
) -> None:
    pipeline = make_pipeline(SETUP, [TABLE])
    state = _ready(pipeline)
    with pytest.raises(ConfigError, match=rf"^backfill_filter .*{problem}"):
        _backfill(pipeline, source_conn_id, condition, grammar)
    assert _harm(database) == UNHARMED
    assert pipeline.state() == state


def test_an_unknown_grammar_is_refused_when_the_task_is_built() -> None:
    with pytest.raises(ConfigError, match=r"filter_grammar 'any' is unknown; use one of: safe, sql"):
        PgBackfillOperator(task_id="b", pipeline="p", table=TABLE, filter_grammar="any")


# ---- real Spark jobs: the reads are read-only on every path ------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("copy_path", ["off", "auto"])  # Spark's JDBC source; the Arrow path (ADBC)
def test_side_effect_functions_fail_in_the_read_only_reads_of_the_spark_job(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path, copy_path: str
) -> None:
    """In the ``sql`` grammar a filter may call non-VOLATILE functions: the check plans it without
    running it, and every read of the job runs in a READ ONLY transaction, so one that writes
    anyway (a function declared STABLE that takes a sequence value) fails."""
    pipeline = make_pipeline(SETUP, [TABLE])
    state = _ready(pipeline)
    with pytest.raises(
        BaselineError,
        # the Arrow path's summary ends with PostgreSQL's CONTEXT line
        match=r"failed in Spark: .*(nextval\(\) in a read-only transaction|SQL function \"sneaky\")",
    ):
        _backfill(pipeline, source_conn_id, "id > 0 AND sneaky()", "sql", copy_path=copy_path)
    assert _harm(database) == UNHARMED
    assert pipeline.state() == state


@pytest.mark.slow
def test_a_long_hostile_looking_but_valid_filter_gives_the_right_rows(
    make_pipeline: MakePipeline, database: Database, source_conn_id: str, lake: Path
) -> None:
    """Quotes, ';', comment marks and unicode inside literals, a 100 kB IN list: the safe grammar
    reads them as values, and the backfill stages exactly the matching rows."""
    pipeline = make_pipeline(SETUP, [TABLE])
    database.execute("UPDATE items SET name = 'it''s; DROP TABLE x; -- é€𝄞' WHERE id IN (3, 4)")
    _ready(pipeline)
    listed = ", ".join(str(i) for i in [*range(1000, 21_000), 10, 11])  # ~110 kB, two rows exist
    condition = (
        f"name = 'it''s; DROP TABLE x; -- é€𝄞' OR id IN ({listed})"
        " OR (price BETWEEN 30 AND 31.5 AND NOT id = 20)"
    )
    assert len(condition) > 100_000
    result = _backfill(pipeline, source_conn_id, condition, "safe")
    expected = database.execute(
        "SELECT count(*) FROM items WHERE name = 'it''s; DROP TABLE x; -- é€𝄞' OR id IN (10, 11)"
        " OR (price BETWEEN 30 AND 31.5 AND id <> 20)"
    )
    assert result["rows"] == expected[0][0] == 5  # 3, 4, 10, 11, 21
    staged = pipeline.state().table(TABLE).backfill
    assert staged is not None and staged.condition == result["condition"]
    assert len(result["condition"]) == 1000 and result["condition"].endswith("...")  # the state stays small
    assert _harm(database) == UNHARMED
