"""A class-data-sharing archive for the Spark drivers pgsync starts on this machine.

A driver of a baseline, compaction or reconciliation job spends seconds loading and verifying
the same ~20,000 classes of Spark, Hive, Derby and Parquet before it does any work, and with
the Hive catalog it does much of that while the job runs. The JVM's own dynamic AppCDS
(JDK 13 and later; Spark 4 needs 17) maps them from an archive instead: after the first job
whose driver runs here has succeeded, a short driver of its own (``spark/class_archive_job.py``:
the Hive catalog, Parquet, a view) writes the archive when it exits
(``-XX:ArchiveClassesAtExit``), and every later job maps it (``-XX:SharedArchiveFile``). The
figures are in DEVELOPMENT.md ("The Spark drivers' class archive"): a baseline's and a compaction's
driver start about 2 s sooner and their catalog work beside the copy costs less.

The archive is written by that separate driver, in the background (the job's task does not
wait for it), never by a job's own: a JVM that fails to write it (a full disk, a quota) exits
with an error, which would fail a job whose work is done. A failed write is marked beside the
archive (``.failed``, its output in ``.log``) and tried again a day later.

The archive is a setting of the machine, off by default: ``PGSYNC_SPARK_CLASS_ARCHIVE_DIR``
names the folder that holds it and turns it on (``make demo``, ``make airflow``, the benches and
the tests set it; ``off`` or nothing: off). It is off by default because its writer is a
process that outlives the task that started it, which an Airflow worker does not expect.
Only drivers that run here (local masters and client deploy mode) get it. The archive belongs
to one JVM binary, Spark distribution and class path (its name is a digest of them); a JVM that
finds it does not match runs as without it (``-Xshare:auto``, the default), its warning off.
Jobs that set their own class-sharing options are left alone, and ``-Xshare:off`` in
``spark.driver.extraJavaOptions`` turns it off for a job.
A folder whose path Spark would split (blanks, quotes, backslashes: Spark splits
``extraJavaOptions`` on blanks) gets no archive, and neither does a driver whose class path
holds a folder with files in it (``SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``, ``HADOOP_CONF_DIR``
and the like, as a YARN client's has): the JVM shares no classes then, and fails to start when
asked to write them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

DIR_VARIABLE = "PGSYNC_SPARK_CLASS_ARCHIVE_DIR"
_QUIET = "-Xlog:cds=off,cds+dynamic=off"
# options that mean the job manages class sharing itself
_OWN_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare:off", "-XX:-UseSharedSpaces")
# characters Spark's split of extraJavaOptions would act on
_UNSPLIT = frozenset(" \t\n\r'\"\\")
# what a driver's class path is made of, besides the Spark distribution
_CLASS_PATH_VARIABLES = ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")
# a failed write of the archive is tried again after this long
_RETRY_SECONDS = 24 * 3600


@dataclass(frozen=True)
class DriverArchive:
    """The archive ``path`` of a driver: to map, or (given ``partial`` and the ``lock`` that
    makes this job its only writer) to write once the job has succeeded (``write``)."""

    path: Path
    partial: Path | None = None
    lock: IO[str] | None = None

    @property
    def dump(self) -> bool:
        return self.partial is not None

    @property
    def java_options(self) -> str:
        """The driver options that map the archive."""
        return f"-XX:SharedArchiveFile={self.path} {_QUIET}"

    @property
    def failed_marker(self) -> Path:
        return self.path.with_name(f".{self.path.stem}.failed")

    @property
    def log_file(self) -> Path:
        return self.path.with_name(f".{self.path.stem}.log")

    def write(self, command: list[str], env: Mapping[str, str]) -> None:
        """Start ``command`` (a driver of ``class_archive_job.py`` given ``dump_options``) in
        the background, in a session of its own, so that this job's task ends now; ``_write``
        puts the archive in place when the driver is done, or marks the failure. The writer
        inherits the lock, so no other job starts writing meanwhile. On a worker whose files do
        not outlive the task (a pod), it simply ends with it."""
        assert self.partial is not None and self.lock is not None
        writer = [sys.executable, "-m", __name__, str(self.path), str(self.partial), *command]
        try:
            with open(self.log_file, "w") as out:
                subprocess.Popen(
                    writer,
                    env=dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(self.lock.fileno(),),  # the lock is held until the writer ends
                )
        except OSError as exc:
            log.warning("could not start saving the Spark driver's classes in %s: %s", self.path, exc)
            self.release()
            return
        self.lock.close()  # the writer's copy holds it now
        log.info(
            "saving the Spark driver's classes in %s in the background (once per Java and Spark; "
            "output in %s): later jobs start faster",
            self.path,
            self.log_file,
        )

    def dump_options(self) -> str:
        """The driver options that write the archive into ``partial`` at exit."""
        return f"-XX:ArchiveClassesAtExit={self.partial} {_QUIET}"

    def release(self) -> None:
        """Give up writing: remove what was written and let another job write it."""
        if self.partial is not None:
            with contextlib.suppress(OSError):
                self.partial.unlink()
        if self.lock is not None:
            self.lock.close()


def archive_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where the archives go; None: off (the default)."""
    named = environ.get(DIR_VARIABLE, "").strip()
    if not named or named.lower() == "off":
        return None
    return Path(named)


def driver_archive(
    java_options: str, env: Mapping[str, str], driver_class_path: str = ""
) -> DriverArchive | None:
    """The archive options for a driver that runs here with ``java_options`` (its
    ``spark.driver.extraJavaOptions``) and environment ``env``; None when the job manages class
    sharing itself, it is turned off, or the folder cannot be written."""
    submit_options = env.get("SPARK_SUBMIT_OPTS", "")
    if any(o in java_options or o in submit_options for o in _OWN_OPTIONS):
        return None
    folder = archive_dir(env)
    key = _key(env, driver_class_path)
    if folder is None or key is None:
        return None
    filled = next((p for p in class_path_folders(env, driver_class_path) if _has_entries(p)), None)
    if filled is not None:
        log.info(
            "no class archive for the Spark driver: its class path holds the folder %s, which has "
            "files (the JVM shares no classes then)",
            filled,
        )
        return None
    if any(c in _UNSPLIT for c in str(folder)):
        log.info("no class archive for the Spark driver: Spark would split its folder %r", str(folder))
        return None
    path = folder / f"spark-driver-{key}.jsa"
    found = DriverArchive(path)
    if path.exists():
        return found
    if _failed_lately(found.failed_marker):
        log.info(
            "no class archive for the Spark driver: writing it failed lately (%s; output in %s); "
            "the next try is a day later, or at once when that file is removed",
            found.failed_marker,
            found.log_file,
        )
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = _try_lock(folder / ".dump.lock")
    except OSError as exc:
        log.info("no class archive for the Spark driver (%s): it starts without one", exc)
        return None
    if lock is None:  # another job is writing it now
        return None
    if path.exists():  # written while we looked
        lock.close()
        return found
    for stale in folder.glob(".spark-driver-*.partial"):  # a writer that was stopped
        with contextlib.suppress(OSError):
            stale.unlink()
    partial = folder / f".spark-driver-{key}.{os.getpid()}.partial"
    return DriverArchive(path, partial=partial, lock=lock)


def class_path_folders(env: Mapping[str, str], driver_class_path: str = "") -> list[Path]:
    """The entries of a driver's class path that may be folders, as Spark's launcher builds it
    with ``env``: ``SPARK_CLASSPATH``, the driver's extra class path, the configuration folder
    (``SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``), ``HADOOP_CONF_DIR``, ``YARN_CONF_DIR`` and
    ``SPARK_DIST_CLASSPATH`` (entries ending in ``*`` name jars, not a folder)."""
    conf_dir = env.get("SPARK_CONF_DIR", "") or (
        str(Path(env["SPARK_HOME"], "conf")) if env.get("SPARK_HOME") else ""
    )
    listed = [
        env.get("SPARK_CLASSPATH", ""),
        driver_class_path,
        conf_dir,
        env.get("HADOOP_CONF_DIR", ""),
        env.get("YARN_CONF_DIR", ""),
        env.get("SPARK_DIST_CLASSPATH", ""),
    ]
    entries = (e.strip() for paths in listed for e in paths.split(os.pathsep))
    return [Path(e) for e in entries if e and not e.endswith("*")]


def _has_entries(path: Path) -> bool:
    """Whether ``path`` is a folder with anything in it."""
    try:
        with os.scandir(path) as found:
            return next(found, None) is not None
    except OSError:  # not a folder, or not there
        return False


def archive_options(conf: dict[str, Any], archive: DriverArchive | None) -> dict[str, Any]:
    """``conf`` (a job's Spark configuration) with the options that map ``archive`` added to
    ``spark.driver.extraJavaOptions``, when it exists."""
    if archive is None or archive.dump:
        return conf
    options = str(conf.get("spark.driver.extraJavaOptions", ""))
    return {**conf, "spark.driver.extraJavaOptions": f"{options} {archive.java_options}".strip()}


def dump_command(
    spark_submit: list[str], conf: dict[str, Any], archive: DriverArchive, class_path: str
) -> list[str]:
    """The spark-submit command of the driver that writes ``archive``: on ``local[1]`` with the
    job's driver options and driver class path (what the archive must match)."""
    options = f"{conf.get('spark.driver.extraJavaOptions', '')} {archive.dump_options()}".strip()
    command = [*spark_submit, "--master", "local[1]", "--conf", "spark.ui.enabled=false"]
    command += ["--conf", f"spark.driver.extraJavaOptions={options}"]
    if class_path:
        command += ["--driver-class-path", class_path]
    job = Path(__file__).resolve().parent.parent / "spark" / "class_archive_job.py"
    return [*command, "--name", "pgsync-class-archive", str(job)]


def _failed_lately(marker: Path) -> bool:
    try:
        return time.time() - marker.stat().st_mtime < _RETRY_SECONDS
    except OSError:
        return False


def _key(env: Mapping[str, str], driver_class_path: str) -> str | None:
    """A digest of what the archive depends on: the JVM binary, the Spark distribution and the
    driver's class path; None without a JVM."""
    binary = java_binary(env)
    spark_home = env.get("SPARK_HOME", "")
    if binary is None or not spark_home:
        return None
    jars = Path(spark_home, "jars")
    try:
        stamps = [binary.stat().st_mtime_ns, jars.stat().st_mtime_ns]
        parts = [str(binary), str(jars.resolve()), *map(str, stamps)]
    except OSError:
        return None
    parts += [f"{name}={env.get(name, '')}" for name in _CLASS_PATH_VARIABLES]
    parts.append(driver_class_path)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def java_binary(env: Mapping[str, str] = os.environ) -> Path | None:
    """The JVM spark-submit starts with ``env`` (``$JAVA_HOME/bin/java``, else ``java`` on the
    path), resolved; None without one."""
    java_home = env.get("JAVA_HOME", "")
    java = shutil.which("java", path=os.path.join(java_home, "bin")) if java_home else shutil.which("java")
    return Path(java).resolve() if java is not None else None


def _try_lock(path: Path) -> IO[str] | None:
    lock = open(path, "a")  # noqa: SIM115 (held until the archive is published)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def _write(path: Path, partial: Path, command: list[str]) -> int:
    """The background writer of ``DriverArchive.write`` (it holds the folder's lock, inherited,
    until it exits): runs the archive's driver ``command``, then moves the archive it wrote
    from ``partial`` to ``path``, or marks the failure."""
    archive = DriverArchive(path, partial)
    try:
        code = subprocess.run(command, timeout=600, check=False).returncode
        if code != 0 or not partial.exists() or partial.stat().st_size == 0:
            raise RuntimeError(f"the driver exited with code {code} and wrote no archive")
        os.replace(partial, path)
        print(f"saved the Spark driver's classes in {path}", flush=True)
        return 0
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        print(f"could not save the Spark driver's classes in {path}: {exc}", flush=True)
        with contextlib.suppress(OSError):
            archive.failed_marker.write_text(f"{exc}\n")
        return 1
    finally:
        archive.release()


if __name__ == "__main__":
    sys.exit(_write(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]))
