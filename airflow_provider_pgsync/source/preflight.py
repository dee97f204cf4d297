"""Is the source fit for logical replication? Pure checks over facts read by the hook.

Every problem names the object and gives the SQL or setting that fixes it; all
problems are reported together.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_pgsync.errors import Problem
from airflow_provider_pgsync.source.names import TableRef, quote_ident

MIN_SERVER_VERSION = 140000
_TABLE_KINDS = {"r": "table", "p": "partitioned table"}
_KIND_NAMES = {"v": "view", "m": "materialized view", "f": "foreign table", "S": "sequence", "i": "index"}


@dataclass(frozen=True)
class TableFacts:
    """What the catalog says about one configured table."""

    table: TableRef
    exists: bool
    relkind: str | None = None
    replica_identity: str | None = None
    has_primary_key: bool = False
    can_select: bool = True
    is_owner: bool = True
    in_publication: bool = False


@dataclass(frozen=True)
class SourceFacts:
    """What the server, the role and the catalog say, as read by ``PgReplicationHook``."""

    database: str
    role: str
    server_version_num: int
    wal_level: str
    role_superuser: bool
    role_replication: bool
    can_create_in_database: bool
    max_replication_slots: int
    slots_in_use: int
    slot_name: str
    slot_plugin: str | None
    slot_database: str | None
    publication_exists: bool
    tables: tuple[TableFacts, ...]


def find_problems(facts: SourceFacts) -> list[Problem]:
    """Every reason the source is not fit, server first, then role, slot and tables."""
    problems: list[Problem] = []
    problems += _server_problems(facts)
    problems += _role_problems(facts)
    problems += _slot_problems(facts)
    for table in facts.tables:
        problems += _table_problems(table, facts)
    return problems


def _server_problems(facts: SourceFacts) -> list[Problem]:
    problems = []
    if facts.server_version_num < MIN_SERVER_VERSION:
        major = facts.server_version_num // 10000
        problems.append(
            Problem(
                "server",
                f"PostgreSQL {major} is too old; pgsync needs 14 or newer",
                "upgrade the source server to PostgreSQL 14 or newer",
            )
        )
    if facts.wal_level != "logical":
        problems.append(
            Problem(
                "server setting wal_level",
                f"wal_level is {facts.wal_level!r}; logical decoding needs 'logical'",
                "ALTER SYSTEM SET wal_level = logical; then restart the server",
            )
        )
    return problems


def _role_problems(facts: SourceFacts) -> list[Problem]:
    role = quote_ident(facts.role)
    problems = []
    if not (facts.role_superuser or facts.role_replication):
        problems.append(
            Problem(
                f"role {role}",
                "may not use replication slots (neither REPLICATION nor superuser)",
                f"ALTER ROLE {role} WITH REPLICATION;",
            )
        )
    if not facts.publication_exists and not facts.role_superuser and not facts.can_create_in_database:
        problems.append(
            Problem(
                f"role {role}",
                f"may not create a publication in database {quote_ident(facts.database)}",
                f"GRANT CREATE ON DATABASE {quote_ident(facts.database)} TO {role};",
            )
        )
    return problems


def _slot_problems(facts: SourceFacts) -> list[Problem]:
    slot = facts.slot_name
    if facts.slot_plugin is None:
        if facts.slots_in_use >= facts.max_replication_slots:
            return [
                Problem(
                    f"replication slot {slot}",
                    f"no free slot: {facts.slots_in_use} of max_replication_slots="
                    f"{facts.max_replication_slots} are in use",
                    "drop an unused slot (SELECT pg_drop_replication_slot('name');) or "
                    f"ALTER SYSTEM SET max_replication_slots = {facts.max_replication_slots + 4}; "
                    "then restart the server",
                )
            ]
        return []
    if facts.slot_plugin != "pgoutput" or facts.slot_database != facts.database:
        return [
            Problem(
                f"replication slot {slot}",
                f"exists already with plugin {facts.slot_plugin!r} in database "
                f"{facts.slot_database!r}; pgsync needs a pgoutput slot in {facts.database!r}",
                f"choose another slot name, or SELECT pg_drop_replication_slot('{slot}'); "
                "if nothing else uses it",
            )
        ]
    return []


def _table_problems(table: TableFacts, facts: SourceFacts) -> list[Problem]:
    name = str(table.table)
    if not table.exists:
        return [
            Problem(
                f"table {name}",
                "does not exist",
                "create it, or correct the name in the pipeline configuration "
                '(quoted names are case-sensitive: "MyTable" is not mytable)',
            )
        ]
    if table.relkind not in _TABLE_KINDS:
        kind = _KIND_NAMES.get(table.relkind or "", f"relation of kind {table.relkind!r}")
        return [Problem(f"table {name}", f"is a {kind}, not a table", "replicate the underlying table")]
    problems = []
    if table.replica_identity == "n":
        problems.append(
            Problem(
                f"table {name}",
                "has REPLICA IDENTITY NOTHING, so updates and deletes cannot be replicated",
                f"ALTER TABLE {name} REPLICA IDENTITY FULL;  (or DEFAULT, if it has a primary key)",
            )
        )
    elif table.replica_identity == "d" and not table.has_primary_key:
        problems.append(
            Problem(
                f"table {name}",
                "has no primary key and REPLICA IDENTITY DEFAULT, so updates and deletes "
                "cannot be replicated",
                f"ALTER TABLE {name} ADD PRIMARY KEY (<key columns>);  or  "
                f"ALTER TABLE {name} REPLICA IDENTITY FULL;",
            )
        )
    role = quote_ident(facts.role)
    if not table.can_select and not facts.role_superuser:
        problems.append(
            Problem(f"table {name}", f"role {role} may not read it", f"GRANT SELECT ON {name} TO {role};")
        )
    if not (table.is_owner or facts.role_superuser or table.in_publication):
        problems.append(
            Problem(
                f"table {name}",
                f"role {role} does not own it, so it cannot add it to the publication",
                f"ALTER TABLE {name} OWNER TO {role};  or let the owner add it to the publication",
            )
        )
    return problems
