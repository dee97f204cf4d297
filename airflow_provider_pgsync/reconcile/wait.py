"""When a destination may be compared with a source snapshot; pure logic.

Every transaction the snapshot S saw committed before S's LSN. Once capture has passed that
LSN, every such transaction is in the changelog; once the destination's watermark for the
table has reached the last captured change of the table, every such change is applied, so
the destination holds everything S saw (and perhaps more, which the left-out keys cover).
"""

from __future__ import annotations

from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState
from airflow_provider_pgsync.state.phases import Ready

Watermark = tuple[int, int]


def not_caught_up(
    state: PipelineState, table: str, destination: str, lsn: LSN, watermark: Watermark | None
) -> str | None:
    """Why ``destination`` cannot be compared yet with ``table`` as of ``lsn`` (None: it can)."""
    if state.last_end_lsn is None or state.last_end_lsn < lsn:
        return f"capture has reached {state.last_end_lsn or 'nothing'}, not yet the snapshot's LSN {lsn}"
    needed = max((int(s.last_commit_lsn) for s in state.segments if s.table == table), default=None)
    if needed is not None and (watermark is None or watermark[0] < needed):
        shown = LSN(watermark[0]) if watermark is not None else "nothing"
        return (
            f"apply has reached {shown} in {destination}, the captured changes of {table} "
            f"go to {LSN(needed)}"
        )
    return None


def not_ready(state: PipelineState, table: str, destination: str) -> str | None:
    """Why ``table`` in ``destination`` is not one to compare (None: it is Ready)."""
    if table not in state.tables:
        return f"table {table} is not in pipeline {state.pipeline!r}'s state: set it up and baseline it first"
    phase = state.tables[table].destination(destination).phase
    if isinstance(phase, Ready):
        return None
    return (
        f"table {table} is {phase.kind} in destination {destination}, not Ready: only a Ready table can be "
        "compared (let its baseline and apply finish, or fix what its Errored reason says)"
    )
