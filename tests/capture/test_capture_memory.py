"""ACCEPTANCE (DESIGN §2 rule 2): a huge transaction is captured in bounded memory.

One transaction of 1,000,000 rows is returned whole by a peek whatever its change
limit; capture streams it through a server-side cursor into several segment parts. The
capture runs in a process of its own that reports its resident set after the imports
and the first connections and its peak at the end. Capture decodes a backlog this size
in a worker process of its own, so the memory it takes is the growth of the capture
process plus the growth of its worker over a fresh worker's interpreter and imports;
that must stay under 300 MB.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
from airflow_provider_pgsync.hooks.replication import PgReplicationHook
from airflow_provider_pgsync.state.model import Init, PipelineState
from tests.capture.capture_worker import run_capture_process
from tests.conftest import Database

ROWS = 1_000_000
MB = 2**20
LIMIT_MB = 300
_WORKER_BASELINE = """
import airflow_provider_pgsync.capture.worker
with open("/proc/self/status") as status:
    print(next(line.split()[1] for line in status if line.startswith("VmRSS:")))
"""


def worker_baseline_kib() -> int:
    """The resident set of a fresh decoding worker before it decodes: its interpreter and imports."""
    probe = [sys.executable, "-c", _WORKER_BASELINE]
    done = subprocess.run(probe, capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.slow
def test_a_million_row_transaction_is_captured_in_bounded_memory(
    database: Database, source_conn_id: str, tmp_path: Path
) -> None:
    database.execute("CREATE TABLE big (id int PRIMARY KEY, n int, h text)")
    hook = PgReplicationHook(postgres_conn_id=source_conn_id)
    hook.ensure_publication("big_pub", ["big"])
    slot = f"s_{database.name}"
    assert hook.ensure_slot(slot).created
    store = PostgresStateStore(hook)
    pipeline = f"p_{database.name}"
    store.save(PipelineState(pipeline).with_table_phase("public.big", Init()))
    started = time.monotonic()
    database.execute("INSERT INTO big SELECT g, g, md5(g::text) FROM generate_series(1, %s) g", (ROWS,))
    inserted = time.monotonic()

    changelog = tmp_path / "changelog"
    run = run_capture_process(
        conn_id="pgsync_big_src",
        conn_url=database.cluster.url(database.name, with_password=True),
        pipeline=pipeline,
        slot=slot,
        publication="big_pub",
        changelog=str(changelog),
        max_changes=1_000,  # the transaction comes whole whatever the limit
    )
    captured = time.monotonic()
    assert run.returncode == 0 and run.result is not None, run.describe()
    result = run.result
    own = (result["rss_peak_kib"] - result["rss_start_kib"]) * 1024
    worker = result["children_maxrss_kib"] * 1024  # the decoding worker's peak
    baseline = worker_baseline_kib() * 1024 if worker else 0
    growth = own + worker - baseline
    print(
        f"\ninsert {inserted - started:.1f} s, capture process {captured - inserted:.1f} s "
        f"(capture itself {result['seconds']:.1f} s); RSS at start {result['rss_start_kib'] / 1024:.0f} MB, "
        f"peak {result['rss_peak_kib'] / 1024:.0f} MB (ru_maxrss {result['ru_maxrss_kib'] / 1024:.0f} MB); "
        f"decoding worker peak {worker / MB:.0f} MB (a fresh one: {baseline / MB:.0f} MB); "
        f"growth {own / MB:.0f} MB + {(worker - baseline) / MB:.0f} MB = {growth / MB:.0f} MB; "
        f"{len(result['segments'])} segment parts"
    )

    assert (result["changes"], result["transactions"]) == (ROWS, 1)
    assert result["rows_by_table"] == {"public.big": ROWS}
    assert growth < LIMIT_MB * MB, (
        f"capture grew by {own / MB:.0f} MB and its worker by {(worker - baseline) / MB:.0f} MB "
        f"(limit {LIMIT_MB} MB)"
    )

    # durable and recorded: several parts of one batch that hold every row once, in order
    state = store.load(pipeline)
    assert [s.path for s in state.segments] == result["segments"]
    assert len(state.segments) > 1, "the transaction was not streamed into several parts"
    assert sum(s.rows for s in state.segments) == ROWS
    wanted = ["_commit_lsn", "_seq", "_op", "id"]
    columns = pa.concat_tables(pq.read_table(changelog / s.path, columns=wanted) for s in state.segments)
    assert columns.num_rows == ROWS
    assert pc.unique(columns["_commit_lsn"]).to_pylist() == [state.segments[0].first_commit_lsn.value]
    assert pc.unique(columns["_op"]).to_pylist() == ["I"]
    assert np.array_equal(np.sort(columns["_seq"].to_numpy()), np.arange(ROWS))
    ids = pc.cast(columns["id"], pa.int64()).to_numpy()
    assert np.array_equal(np.sort(ids), np.arange(1, ROWS + 1))
    info = hook.slot_info(slot)
    assert info is not None and info.confirmed_flush_lsn is not None
    assert str(info.confirmed_flush_lsn) == result["advanced_to"] == str(state.last_end_lsn)
