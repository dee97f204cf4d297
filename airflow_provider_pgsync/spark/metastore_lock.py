"""Exclusive use of a lake's embedded Derby metastore, which admits one process at a time.

Jobs of one warehouse take a file lock beside its metastore before they open it, and shut
Derby down before they let it go, so the next process (another job, ``spark-sql``) can open
it. Other metastores (a Hive metastore service) need neither: every step here is a no-op.
"""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from pyspark.sql import SparkSession

from airflow_provider_pgsync.changelog import private
from airflow_provider_pgsync.destinations.lake import LakeDestination

log = logging.getLogger("pgsync.spark")

# Derby folders whose metastore a ``hold()`` block of this process holds: catalog steps of
# other tables inside that block use it as it is (no second lock, no shutdown in between)
_HELD: set[str] = set()


class MetastoreLock:
    """The file lock of ``destination``'s embedded Derby metastore, for one job in ``spark``."""

    def __init__(self, spark: SparkSession, destination: LakeDestination) -> None:
        self.spark, self.destination = spark, destination
        self._lock: IO[str] | None = None
        self._folder: str | None = None  # made ready once (``folder``)

    @property
    def taken(self) -> bool:
        """Whether this job holds the lock (``try_take`` or ``hold``)."""
        return self._lock is not None

    def held_here(self) -> bool:
        """Whether a ``hold()`` block of this process holds this metastore."""
        folder = self.folder()
        return folder is not None and folder in _HELD

    def folder(self) -> str | None:
        """The embedded metastore's local folder, made and given Derby's log on first use;
        None for other metastores."""
        local = self.destination.local_path
        if self.destination.metastore != "derby" or local is None:
            return None
        if self._folder is None:
            private.make_dirs(local)  # a new warehouse (0700): its lock file and metastore go here
            jvm = self.spark.sparkContext._jvm
            assert jvm is not None
            # Derby writes its log where the process runs unless told otherwise
            jvm.java.lang.System.setProperty("derby.stream.error.file", f"{local}/derby.log")
            self._folder = local
        return local

    def try_take(self) -> bool:
        """Take the lock if it is free; True when this job holds it."""
        local = self.folder()
        assert local is not None
        lock = open(f"{local}/.metastore.lock", "a")  # noqa: SIM115 (kept open while held)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return False
        self._lock = lock
        return True

    @contextmanager
    def hold(self) -> Iterator[None]:
        """The metastore for this block alone (taken here unless ``try_take`` took it, waiting
        for another process if need be), Derby shut down and the lock released at exit; inside
        another ``hold()`` block of this process, that block's."""
        local = self.folder()
        if local is None or local in _HELD:
            yield
            return
        if self._lock is None and not self.try_take():
            log.info("waiting for the Derby metastore in %s (another job or spark-sql holds it)", local)
            self._lock = open(f"{local}/.metastore.lock", "a")  # noqa: SIM115 (closed in finally)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        _HELD.add(local)
        try:
            yield
        finally:
            _HELD.discard(local)
            try:
                shutdown_derby(self.spark)
            finally:
                assert self._lock is not None
                self._lock.close()
                self._lock = None


def shutdown_derby(spark: SparkSession) -> None:
    """Stop the embedded Derby engine so the next process can open the metastore."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        jvm.java.sql.DriverManager.getConnection("jdbc:derby:;shutdown=true")
    except Exception as exc:  # Derby reports a clean shutdown as an SQLException (XJ015)
        if "XJ015" not in str(exc) and "shutdown" not in str(exc).lower():
            raise
