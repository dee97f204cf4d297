"""Is the slot the one the state was built from, and still usable? (DESIGN rule 10)"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_pgsync.hooks.replication import SlotInfo
from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.state.model import PipelineState


@dataclass(frozen=True)
class SlotProblem:
    """Why capture cannot go on with this slot, and what to do."""

    reason: str
    solution: str


def slot_problem(state: PipelineState, slot_name: str, info: SlotInfo | None) -> SlotProblem | None:
    """None when capture may go on; otherwise the problem (tables go to Errored)."""
    rebaseline = (
        "run the pipeline's setup DAG (or PgCreateSlotOperator and then its init_tables step): it creates "
        f"slot {slot_name} again where missing, adopts it and sends every table of every destination "
        "back to Init, then triggers their rebaseline; changes from the time the slot was missing "
        "reach the destinations only through that rebaseline"
    )
    if state.slot_name is not None and state.slot_name != slot_name:
        # first: whatever the new slot's state, the pipeline's changes are in the other one
        old = state.slot_name
        return SlotProblem(
            f"the pipeline state was built from slot {old}, not {slot_name}",
            f"configure slot {old} again (capture goes on from it), or keep {slot_name}: {rebaseline}; "
            f"then drop slot {old} if nothing else reads it (PgDropSlotOperator, or SELECT "
            f"pg_drop_replication_slot('{old}')), so that the source stops keeping WAL for it",
        )
    if info is None:
        return SlotProblem(f"replication slot {slot_name} does not exist", rebaseline)
    if info.lost:
        return SlotProblem(
            f"replication slot {slot_name} was invalidated (wal_status 'lost'): the server removed WAL "
            "it still needed, probably because of max_slot_wal_keep_size",
            f"drop the slot (PgDropSlotOperator, or SELECT pg_drop_replication_slot('{slot_name}')), then "
            f"{rebaseline}; run capture more often or raise max_slot_wal_keep_size",
        )
    expected = state.last_end_lsn or state.slot_creation_lsn
    confirmed = info.confirmed_flush_lsn
    if expected is not None and confirmed is not None and confirmed > expected:
        return SlotProblem(
            f"replication slot {slot_name} is at {confirmed}, past {expected} where this pipeline left "
            "it: it was replaced (dropped and created again) or advanced by another consumer, so "
            "changes in between were skipped",
            rebaseline,
        )
    return None


def source_behind(state: PipelineState, flush: LSN) -> str | None:
    """Why capture must not peek when the source's WAL (flushed up to ``flush``) is behind what the
    pipeline captured: every transaction would look durable already and be skipped. None when it
    is not behind."""
    if state.last_end_lsn is None or flush >= state.last_end_lsn:
        return None
    return (
        f"the source's WAL ends at {flush}, before {state.last_end_lsn}, where pipeline {state.pipeline!r} "
        "captured up to: this is not the server the pipeline captured from (a server restored from a "
        "backup, or a connection pointing at another server); nothing was captured. Check the source "
        "connection; if that server is the source now, run the pipeline's teardown DAG and then its "
        "setup DAG (a new state and slot: every table is baselined again)"
    )


SETUP_FIRST = (
    "create the slot before the baseline: run the pipeline's setup (PgCreateSlotOperator, or the setup "
    "DAG's create_slot task), then run the baseline again"
)


def slot_creation_bound(state: PipelineState, slot_name: str, info: SlotInfo) -> LSN | None:
    """An LSN at or after the slot's creation: the one the state recorded for it, else the
    slot's confirmed position (a slot only ever moves forward from where it was created)."""
    if state.slot_name == slot_name and state.slot_creation_lsn is not None:
        return state.slot_creation_lsn
    return info.confirmed_flush_lsn


def baseline_slot_problem(
    state: PipelineState, slot_name: str, info: SlotInfo | None, *, baseline_lsn: LSN | None = None
) -> SlotProblem | None:
    """None when a baseline may rely on ``slot_name`` for every change after its snapshot: the
    slot exists, is usable, is the one the state was built from, and was created before the
    snapshot at ``baseline_lsn`` (when given); otherwise the problem (DESIGN rules 5 and 10)."""
    if info is None:
        return SlotProblem(
            f"replication slot {slot_name} does not exist: the changes committed after the baseline's "
            "snapshot would be captured by nobody",
            SETUP_FIRST,
        )
    problem = slot_problem(state, slot_name, info)
    if problem is not None:
        return problem
    created = slot_creation_bound(state, slot_name, info)
    if created is None:
        return SlotProblem(
            f"replication slot {slot_name} has no confirmed position yet (it is being created)",
            "wait until its creation has finished, then run the baseline again",
        )
    if baseline_lsn is not None and created > baseline_lsn:
        return SlotProblem(
            f"replication slot {slot_name} was created at {created}, after the baseline's snapshot at "
            f"{baseline_lsn}: the changes committed in between would be in neither the base nor "
            "the changelog",
            SETUP_FIRST,
        )
    return None
