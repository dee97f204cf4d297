"""The functions the baseline job runs in Spark tasks, and how they find the password file.

Each task is a small frozen dataclass that Spark serializes (cloudpickle) and ships to an
executor; it holds connection strings without passwords and the password file's reference
(``Passfile``), which each task resolves where it runs. Nothing here holds a password, so no
serialized task can carry one (``tests/spark/test_baseline_tasks.py`` checks the bytes).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from psycopg.conninfo import make_conninfo

from airflow_provider_pgsync.baseline.passfile import private_passfile
from airflow_provider_pgsync.baseline.pg_copy import PartitionCopy, Sink
from airflow_provider_pgsync.typemap.spark import ColumnRead


@dataclass(frozen=True)
class Passfile:
    """Where a process of the job finds the password file: ``name``, a file shipped with the
    job (``shipped``: found through ``SparkFiles``, in the driver's and every executor's own
    copy), or a path that exists on every node (a mounted secret); empty: no password file."""

    name: str = ""
    shipped: bool = False

    def path(self) -> str | None:
        """This process's password file, private to its user (libpq requires it), or None."""
        if not self.name:
            return None
        if not self.shipped:
            return private_passfile(self.name)
        from pyspark import SparkFiles

        # Spark's copy (local masters, standalone and YARN executors); the operator's PGPASSFILE
        # (a YARN driver: YARN, not Spark, ships the file to it)
        candidates = (SparkFiles.get(self.name), os.environ.get("PGPASSFILE", ""))
        for candidate in candidates:
            if candidate and os.path.isfile(candidate):
                return private_passfile(candidate)
        raise FileNotFoundError(
            f"the password file {self.name} shipped with the baseline job is in none of "
            f"{', '.join(c for c in candidates if c)}: was it shipped (--files)?"
        )

    def conninfo(self, conninfo: str) -> str:
        """``conninfo`` with this process's password file (libpq reads the password from it)."""
        path = self.path()
        return make_conninfo(conninfo, passfile=path) if path else conninfo


@dataclass(frozen=True)
class ArrowCopy:
    """The Arrow path's task: one ctid range into one Parquet file (``baseline/arrow_copy.py``);
    called with ``(path, SELECT)``, adds the rows it wrote to ``rows`` (an accumulator)."""

    conninfo: str
    passfile: Passfile
    session: tuple[str, ...]
    reads: tuple[ColumnRead, ...]
    rows: Any

    def __call__(self, item: tuple[str, str]) -> int:
        from airflow_provider_pgsync.baseline.arrow_copy import copy_partition

        count = copy_partition(
            self.passfile.conninfo(self.conninfo), self.session, item[1], self.reads, item[0]
        )
        self.rows.add(count)
        return count


@dataclass(frozen=True)
class PostgresCopy:
    """The PostgreSQL destinations' task: one ctid range of the source into every destination's
    staging table (``baseline/pg_copy.py``); called with ``(partition, SELECT)``, returns what it
    copied and which destinations failed (the task itself fails only when the source does).
    ``sinks`` hold conninfos without passwords."""

    conninfo: str
    passfile: Passfile
    session: tuple[str, ...]
    sinks: tuple[Sink, ...]
    rows: Any

    def __call__(self, item: tuple[int, str]) -> PartitionCopy:
        from airflow_provider_pgsync.baseline.pg_copy import copy_partition

        copied = copy_partition(
            self.passfile.conninfo(self.conninfo),
            self.session,
            item[1],
            with_passfile(self.sinks, self.passfile),
            item[0],
        )
        self.rows.add(copied.rows)
        return copied


def with_passfile(sinks: Sequence[Sink], passfile: Passfile) -> list[Sink]:
    """``sinks`` whose conninfos name this process's password file."""
    return [replace(sink, conninfo=passfile.conninfo(sink.conninfo)) for sink in sinks]
