"""A class-data-sharing archive of the classes a Spark driver loads, for the tests' Spark JVMs.

The suite starts a few hundred Spark drivers (baseline and compaction jobs, the lake's
checks); each spends most of its start loading and verifying the same ~20,000 classes of
Spark, Hive, Derby and Parquet. The JVM's own AppCDS (JDK 13+) maps them from an archive
instead: measured on a 2-core machine, a Hive-catalog session in 29 s instead of 65 s under
load. The archive is dumped once per checkout and JVM (``-XX:ArchiveClassesAtExit``) by one
session that touches what the jobs touch (the Derby metastore, Parquet, a view), and every
later driver maps it (``-XX:SharedArchiveFile``). A driver whose class path or JVM does not
match the archive runs as without it (``-Xshare:auto``, the default); its warnings are off.
The operators' drivers have an archive of their own in production, written by the first job
(``hooks/spark_class_archive.py``); in the tests they give way to this one, which every test
JVM maps from the start (pyspark sessions of the test scripts too), since ``SPARK_SUBMIT_OPTS``
names it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from airflow_provider_pgsync.hooks.spark_class_archive import java_binary
from airflow_provider_pgsync.hooks.spark_submit import driver_environment

# the production archive's driver: it touches what the jobs touch (the Derby metastore, Parquet,
# a view, Arrow), in a scratch folder of its own
_DUMP_JOB = Path(__file__).resolve().parents[1] / "airflow_provider_pgsync" / "spark" / "class_archive_job.py"


def _key() -> str | None:
    """What the archive depends on: the JVM binary and the Spark distribution."""
    binary = java_binary()
    if binary is None:
        return None
    import pyspark

    parts = [
        str(binary),
        str(binary.stat().st_mtime_ns),
        pyspark.__version__,
        str(Path(pyspark.__file__).parent),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def spark_class_archive(folder: Path) -> Path | None:
    """The archive for this JVM and Spark under ``folder``, dumped first if missing; None
    when there is no JVM or the dump failed (the tests then run without it)."""
    key = _key()
    if key is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"spark-{key}.jsa"
    with open(folder / "dump.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist workers: one dump, the others wait
        if archive.exists():
            return archive
        partial = folder / f"spark-{key}.jsa.partial"
        options = os.environ.get("SPARK_SUBMIT_OPTS", "")
        env = {
            **os.environ,
            **driver_environment(),  # its Python tasks need this Python's pyarrow
            "PYTHONWARNINGS": "ignore",
            "SPARK_SUBMIT_OPTS": f"{options} -XX:ArchiveClassesAtExit={partial} -Xlog:disable",
        }
        try:
            subprocess.run(
                [sys.executable, str(_DUMP_JOB)], check=True, capture_output=True, timeout=600, env=env
            )
        except (subprocess.SubprocessError, OSError):
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            return None
        if not partial.exists():
            return None
        partial.rename(archive)
    return archive


def use_archive(archive: Path) -> None:
    """Let every Spark driver this process starts map ``archive``."""
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{options} -XX:SharedArchiveFile={archive} -Xlog:disable".strip()
