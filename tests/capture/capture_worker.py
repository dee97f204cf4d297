"""One capture run in a process of its own, for the crash and memory acceptance tests.

The child side (``python -m tests.capture.capture_worker ...``) runs ``capture`` once
with a PostgreSQL state store in the source database and prints one result line. It
reads the source connection from an ``AIRFLOW_CONN_<ID>`` variable of its environment
(never from its command line) and, given ``--fail-point``, arms that point in its process:
it dies there with exit code 77 (``failpoints``).

Besides the capture result it reports its memory in KiB: the resident set after the
imports and the first connections (``VmRSS``), its peak at the end (``VmHWM``, and
``ru_maxrss`` for comparison), and the peak of its largest child process
(``RUSAGE_CHILDREN``): capture decodes a large backlog in a worker process of its own.

The parent side is ``run_capture_process``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULT_PREFIX = "PGSYNC_CAPTURE_RESULT "
HOLDER = "pgsync capture worker"
"""The application_name of the worker's capture-lock session (the parent polls for it to end)."""


@dataclass(frozen=True)
class WorkerRun:
    """What one worker process did: its exit code, output, and the result line if it printed one."""

    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None

    def describe(self) -> str:
        out, err = self.stdout[-3000:], self.stderr[-6000:]
        return f"exit code {self.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"


def run_capture_process(
    *,
    conn_id: str,
    conn_url: str,
    pipeline: str,
    slot: str,
    publication: str,
    changelog: str,
    max_changes: int,
    fail_point: str | None = None,
    settings: Mapping[str, int] | None = None,
    timeout: float = 300.0,
    extra_env: Mapping[str, str] | None = None,
) -> WorkerRun:
    """Run one capture in a child process; ``conn_url`` reaches it through ``AIRFLOW_CONN_<ID>`` only.

    ``settings`` are further integer CaptureSettings (e.g. ``worker_from_bytes``).
    """
    env = dict(os.environ)
    env[f"AIRFLOW_CONN_{conn_id.upper()}"] = conn_url
    env.update(extra_env or {})
    cmd = [
        sys.executable, "-m", "tests.capture.capture_worker",
        "--conn-id", conn_id,
        "--pipeline", pipeline,
        "--slot", slot,
        "--publication", publication,
        "--changelog", changelog,
        "--max-changes", str(max_changes),
    ]  # fmt: skip
    for name, value in (settings or {}).items():
        cmd += ["--setting", f"{name}={value}"]
    if fail_point is not None:
        cmd += ["--fail-point", fail_point]
    done = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    result = None
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
    return WorkerRun(done.returncode, done.stdout, done.stderr, result)


# ---- the child ----------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conn-id", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--slot", required=True)
    parser.add_argument("--publication", required=True)
    parser.add_argument("--changelog", required=True)
    parser.add_argument("--max-changes", type=int, required=True)
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=INT")
    parser.add_argument("--fail-point")
    args = parser.parse_args(argv)
    more = {name: int(value) for name, value in (s.split("=", 1) for s in args.setting)}

    from airflow_provider_pgsync import failpoints
    from airflow_provider_pgsync.capture.run import CaptureSettings, capture
    from airflow_provider_pgsync.hooks.postgres_state_store import PostgresStateStore
    from airflow_provider_pgsync.hooks.replication import PgReplicationHook

    failpoints.arm(args.fail_point)
    hook = PgReplicationHook(postgres_conn_id=args.conn_id)
    store = PostgresStateStore(hook)
    store.load(args.pipeline)  # connection lookup, first connection, state table checked
    hook.slot_info(args.slot)
    rss_start = _status_kib("VmRSS")

    settings = CaptureSettings(
        pipeline=args.pipeline,
        slot_name=args.slot,
        publication_name=args.publication,
        changelog_uri=args.changelog,
        max_changes=args.max_changes,
        **more,
    )
    result = capture(hook, store, settings, holder=HOLDER)

    report = {
        "payloads": result.payloads,
        "changes": result.changes,
        "transactions": result.transactions,
        "segments": [s.path for s in result.segments],
        "rows_by_table": result.rows_by_table,
        "advanced_to": None if result.advanced_to is None else str(result.advanced_to),
        "idle": result.idle,
        "seconds": result.seconds,
        "rss_start_kib": rss_start,
        "rss_peak_kib": _status_kib("VmHWM"),
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "children_maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    }
    print(RESULT_PREFIX + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
