"""What apply does after a destination answers a change of a table's columns with Rebaseline or
Error: the phase it records (``on_schema_change``), and the words that tell a user what changed
and how to recover.

Pure: no Airflow, no connection (type names come from psycopg's table of built-in types).
"""

from __future__ import annotations

from psycopg.postgres import types as builtin_types

from airflow_provider_pgsync.apply.destination import SchemaAnswer, SchemaDecision
from airflow_provider_pgsync.errors import ConfigError
from airflow_provider_pgsync.source.names import shown
from airflow_provider_pgsync.state.phases import Errored, Init, TablePhase

ON_SCHEMA_CHANGE = ("rebaseline", "fail")
"""``rebaseline``: the destination goes back to Init for that table and the cdc DAG triggers its
rebaseline (and fails, naming it); ``fail``: the destination goes Errored until rebaselined."""

_LENGTH_TYPES = {1042, 1043, 1560, 1562}  # bpchar, varchar, bit, varbit: typmod is a length (+4 for chars)
_NUMERIC = 1700


def check_on_schema_change(value: object, what: str = "on_schema_change") -> str:
    """``value`` if it is one of ``ON_SCHEMA_CHANGE``; else ConfigError naming ``what``."""
    if isinstance(value, str) and value in ON_SCHEMA_CHANGE:
        return value
    raise ConfigError(f"{what} must be one of {', '.join(ON_SCHEMA_CHANGE)}, not {shown(value)}")


def type_text(type_oid: int, type_modifier: int = -1) -> str:
    """A type as ``format_type`` prints the built-in ones (``integer``, ``character varying(10)``,
    ``numeric(12,2)``, ``text[]``); another type (an enum, a domain...) as ``type OID <n>``."""
    info = builtin_types.get(type_oid)
    if info is None:
        return f"type OID {type_oid}"
    is_array = info.oid != type_oid
    base_oid = info.oid
    name = info.regtype
    if type_modifier >= 0 and base_oid == _NUMERIC and type_modifier >= 4:
        packed = type_modifier - 4
        scale = packed & 0x7FF
        name = f"numeric({(packed >> 16) & 0xFFFF},{scale - 0x800 if scale >= 0x400 else scale})"
    elif type_modifier >= 0 and base_oid in _LENGTH_TYPES:
        length = type_modifier - 4 if base_oid in (1042, 1043) else type_modifier
        name = f"{name}({length})"
    return f"{name}[]" if is_array else name


def rebaseline_remedy(table: str, destination: str, baseline_dag_id: str | None) -> str:
    """How a user rebaselines ``table`` in ``destination`` (through the baseline DAG if known)."""
    if baseline_dag_id:
        return (
            f"rebaseline {table} in {destination}: trigger {baseline_dag_id} with "
            f'tables=["{table}"], destinations=["{destination}"], mode=rebaseline'
        )
    return f"rebaseline {table} in {destination} (PgBaselineOperator with rebaseline=True, this destination)"


def schema_phase(
    table: str,
    destination: str,
    decision: SchemaDecision,
    change: str,
    previous: TablePhase,
    *,
    on_schema_change: str,
    baseline_dag_id: str | None = None,
    rows_outside: bool = False,
) -> tuple[TablePhase, str]:
    """The phase of ``table`` in ``destination`` after its answer ``decision`` (not Continue) to
    ``change`` (``SchemaDiff.describe``), and the reason to report: Rebaseline goes back to Init
    (``on_schema_change`` ``rebaseline``) or Errored with no retry (``fail``); Error goes
    Errored, retried by hand once the destination's table is fixed. ``rows_outside``: ``change``
    says how rows of the table changed outside the stream (``SchemaChange.outside``), not its columns."""
    reason = f"table {table}: {change}" if rows_outside else f"table {table} changed its columns ({change})"
    if decision.reason:
        reason += f"; destination {destination}: {decision.reason}"
    if decision.answer is SchemaAnswer.REBASELINE:
        reason += f"; destination {destination} cannot follow it without a rebaseline"
        if on_schema_change == "rebaseline":
            return Init(), reason
        reason += " (on_schema_change: fail)"
        solution = rebaseline_remedy(table, destination, baseline_dag_id)
        return Errored(reason=reason, solution=solution, retry="none", previous=previous.kind), reason
    reason += f"; destination {destination} cannot follow it"
    solution = (
        f"change table {table} in destination {destination} by hand and run apply again (the cdc DAG), "
        f"or {rebaseline_remedy(table, destination, baseline_dag_id)}"
    )
    return Errored(reason=reason, solution=solution, retry="manual", previous=previous.kind), reason


def no_identity_phase(
    table: str, source_table: str, destination: str, previous: TablePhase, baseline_dag_id: str | None = None
) -> tuple[TablePhase, str]:
    """Errored, with no retry, for a table whose changes carry no replica identity any more (its
    primary key dropped under REPLICA IDENTITY DEFAULT, or REPLICA IDENTITY NOTHING; DESIGN §2
    rule 7): no destination can tell its rows apart, and a baseline of it would be just as blind.
    The remedy gives it an identity again, then rebaselines it; the reason to report."""
    reason = (
        f"table {table} has no replica identity any more (no primary key under REPLICA IDENTITY DEFAULT, "
        "or REPLICA IDENTITY NOTHING): the source refuses its UPDATE and DELETE statements, and destination "
        f"{destination} cannot tell its rows apart"
    )
    solution = (
        f"ALTER TABLE {source_table} REPLICA IDENTITY FULL; (or give it a primary key again), then "
        + rebaseline_remedy(table, destination, baseline_dag_id)
    )
    return Errored(reason=reason, solution=solution, retry="none", previous=previous.kind), reason
