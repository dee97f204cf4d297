"""Tables dropped in the source, as capture records and reports them (``state/dropped.py``).

Two ways to know, both exact about what is captured:

- the source's DDL trigger writes a message in the DROP's own transaction (``source/ddl.py``):
  capture reads it in the stream after every change made to the table before it
  (``DecodeWriter.on_message``) and records the drop at the message's LSN;
- where that trigger is not active (a setup without superuser), capture reads, before the
  peek's bound, which followed relation OIDs the catalog no longer has (``gone``): each was
  dropped before that bound, so once a peek up to the bound was read whole (an idle batch), every
  change of the table is captured, and the drop is recorded "at or before" the bound.

Either way, nothing is lost and the destinations keep the table's rows as of the drop, so it is
no error of the pipeline: each capture run logs a warning per dropped table (what the
destinations keep, how to take the table out of the pipeline) until the table is torn down.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping

from airflow_provider_pgsync.capture.worker import DecodeResult
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState, SourceDrop, TableState


def followed_oids(state: PipelineState) -> list[int]:
    """The relation OIDs of the tables the state follows that are not known to be dropped."""
    return sorted({ts.relation_id for ts in state.tables.values() if ts.relation_id and ts.dropped is None})


def with_catalog_drops(
    decoded: DecodeResult, state: PipelineState, gone: Collection[int], upto: LSN
) -> DecodeResult:
    """``decoded`` with every table whose relation OID is in ``gone`` (missing from the catalog
    before the bound ``upto`` was read) recorded as dropped at or before ``upto``, unless the DDL
    trigger's message recorded it already. Only for a batch that read its peek up to ``upto``."""
    tables = dict(decoded.tables)
    for key, known in state.tables.items():
        current = tables.get(key, known)
        if current.dropped is None and current.relation_id in gone:
            assert current.relation_id is not None
            tables[key] = current.with_dropped(SourceDrop(current.relation_id, upto, exact=False))
    return dataclasses.replace(decoded, tables=tables) if tables != decoded.tables else decoded


def dropped_warning(pipeline: str, ts: TableState) -> str:
    """What a capture run says about a table dropped in the source, for as long as the pipeline
    keeps it."""
    assert ts.dropped is not None
    destinations = ", ".join(f"{n} ({d.phase.kind})" for n, d in sorted(ts.destinations.items()))
    keep = f"its destinations {destinations} keep" if destinations else "its destinations keep"
    return (
        f"table {ts.key} of pipeline {pipeline!r} was {ts.dropped.describe()}: every change committed "
        f"before the DROP is captured, nothing more will be, and {keep} its rows as of the drop. To take "
        f"it out of the pipeline: remove it from the pipeline's tables, run the setup DAG (it takes the "
        f"table out of the publication), then trigger the teardown DAG (pgsync_{pipeline}_teardown) "
        f"with param tables {json.dumps([ts.key])} (and drop_tables true to drop its destination tables "
        "too). "
        "A table created later under its name is another table and is not followed: to follow it "
        "instead, keep the name in the pipeline's tables and run the setup DAG (it baselines it)"
    )


def skipped_warning(state: PipelineState, name: str, count: int, gone: Collection[int] = ()) -> str:
    """Why capture left out ``count`` change(s) of table ``name``, a table the pipeline does not
    follow (``DecodeWriter.version_of``), and what to do about it."""
    changes = f"{count:,} change(s) of table {name} left out"
    same = [ts for ts in state.tables.values() if name in (ts.key, str(ts.source_table))]
    if not same:
        return (
            f"{changes}: pipeline {state.pipeline!r} does not follow it (a table taken out of the "
            "pipeline's config; its changes were in the slot before setup took it out of the "
            "publication)"
        )
    ts = same[0]
    if ts.dropped is not None or ts.relation_id in gone:
        return (
            f"{changes}: it is a new table under the name of table {ts.key}, which pipeline "
            f"{state.pipeline!r} followed as relation OID {ts.relation_id} and which was dropped in the "
            "source; it is not followed. To follow it instead, keep the name in the pipeline's tables "
            "and run the setup DAG: it follows the new table and baselines it again into every destination"
        )
    return (
        f"{changes}: it is another table than {ts.key}, which pipeline {state.pipeline!r} follows as "
        f"relation OID {ts.relation_id} (named {ts.source_table} in the source now: renamed there). Take "
        "it out of the publication: run the setup DAG (it sets the publication to the pipeline's "
        "tables), or ALTER PUBLICATION ... DROP TABLE it; its changes left out are not part of the "
        "pipeline"
    )


def drop_warnings(state: PipelineState, decoded_tables: Mapping[str, TableState]) -> list[str]:
    """One warning per table dropped in the source, in the state saved by this run."""
    tables = {**state.tables, **decoded_tables}
    return [dropped_warning(state.pipeline, ts) for _, ts in sorted(tables.items()) if ts.dropped is not None]
