"""A pipeline state with every kind of field set, for round trips (test-only)."""

from __future__ import annotations

from airflow_provider_pgsync.pgoutput.lsn import LSN
from airflow_provider_pgsync.source.names import TableRef
from airflow_provider_pgsync.state.model import (
    XID_MAX,
    ColumnInfo,
    DataSync,
    Errored,
    Init,
    PipelineState,
    SegmentInfo,
    SyncDone,
)

ODD = TableRef("Sales Data", 'Odd "Name"; DROP TABLE x;--')

TOP = LSN(2**64 - 1)


def full_state() -> PipelineState:
    segment = SegmentInfo("seg/0001.parquet", str(ODD), 2, LSN(TOP.value - 5), TOP, 2**63, XID_MAX, 10)
    state = (
        PipelineState("orders_to_lake")
        .with_slot("pgsync_orders", LSN.parse("FFFFFFFF/FFFFFF00"))
        .with_table_phase(ODD, Init())
        .with_table_phase(ODD, DataSync())
        .with_table_phase(ODD, SyncDone("snap-1", TOP, XID_MAX - 3, XID_MAX, (XID_MAX - 2, XID_MAX - 1)))
        .with_table_phase("public.plain", Init())
        .with_table_phase("public.plain", Errored("lost", "rebaseline", "none"))
        .with_watermark("lake", "FFFFFFFF/FFFFFFFF/17")
    )
    odd = state.table(ODD).with_columns([ColumnInfo("Id", 23, -1, True), ColumnInfo("a;b", 1043, 14, False)])
    return state.with_capture(TOP, [segment], [odd])
