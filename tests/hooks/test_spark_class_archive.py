"""The Spark drivers' class archive: the first driver that runs here writes it at exit, later
ones map it; a job with its own class-sharing options, a folder turned off or unwritable, a
failed job and an archive that does not fit the JVM change nothing else."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

import pytest
from airflow.exceptions import AirflowException

from airflow_provider_pgsync.hooks.spark_class_archive import (
    DIR_VARIABLE,
    archive_dir,
    archive_options,
    class_path_folders,
    driver_archive,
)
from airflow_provider_pgsync.hooks.spark_submit import BaselineSubmitHook, driver_environment

# the subject is the drivers' class archive:
# not the worker's resident driver (tests/support/resident_spark.py)
pytestmark = pytest.mark.spark_submit

JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def _env(folder: Path, **more: str) -> dict[str, str]:
    return {**os.environ, **driver_environment(), "SPARK_SUBMIT_OPTS": "", DIR_VARIABLE: str(folder), **more}


def _writer(path: Path, code: int = 0, gate: Path | None = None) -> list[str]:
    """A command standing for the archive's driver: (once ``gate`` exists) writes ``path`` and
    exits with ``code``."""
    wait = (  # at most a minute: a test that failed before opening the gate leaves no waiter
        f"end = time.monotonic() + 60\nwhile not os.path.exists({str(gate)!r}) and time.monotonic() < end:"
        " time.sleep(0.05)\n"
        if gate
        else ""
    )
    write = f"open({str(path)!r}, 'wb').write(b'classes')\nraise SystemExit({code})\n"
    return [sys.executable, "-c", f"import os, time\n{wait}{write}"]


def _wait_for(path: Path, seconds: float = 180) -> None:
    """Until ``path`` exists (the background writer's outcome), or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {seconds} s"
        time.sleep(0.1)


def _wait_until_unlocked(folder: Path, seconds: float = 60) -> None:
    """Until the background writer has ended (it holds the folder's lock until it exits)."""
    deadline = time.monotonic() + seconds
    with open(folder / ".dump.lock", "a") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return  # closing the file releases it
            except BlockingIOError:
                assert time.monotonic() < deadline, f"the writer in {folder} did not end in {seconds} s"
                time.sleep(0.05)


def test_the_first_job_has_the_archive_written_and_later_ones_map_it(tmp_path: Path) -> None:
    env = _env(tmp_path)
    first = driver_archive("-Dx=1", env)
    assert first is not None and first.dump and first.partial is not None
    assert archive_options({JAVA_OPTIONS: "-Dx=1"}, first) == {JAVA_OPTIONS: "-Dx=1"}  # runs as is
    assert first.dump_options().startswith(f"-XX:ArchiveClassesAtExit={first.partial} ")
    gate = tmp_path / "go"
    first.write(_writer(first.partial, gate=gate), env)
    assert driver_archive("", env) is None  # the writer holds the lock: no second writer
    gate.touch()
    _wait_for(first.path)
    [archive] = tmp_path.glob("spark-driver-*.jsa")
    assert archive == first.path and archive.read_bytes() == b"classes" and not first.partial.exists()
    later = driver_archive("", env)
    assert later is not None and not later.dump
    assert archive_options({JAVA_OPTIONS: "-Dx=1"}, later) == {
        JAVA_OPTIONS: f"-Dx=1 -XX:SharedArchiveFile={archive} -Xlog:cds=off,cds+dynamic=off"
    }


def test_a_failed_write_is_logged_and_tried_again_a_day_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = _env(tmp_path)
    first = driver_archive("", env)
    assert first is not None and first.partial is not None
    first.write(_writer(first.partial, code=1), env)  # e.g. the disk filled up
    _wait_for(first.failed_marker)
    _wait_until_unlocked(tmp_path)
    assert "could not save the Spark driver's classes" in first.log_file.read_text()
    assert not list(tmp_path.glob("*.jsa"))
    assert driver_archive("", env) is None  # no job tries it again at once
    assert "writing it failed lately" in caplog.text
    assert not first.partial.exists()
    day_ago = first.failed_marker.stat().st_mtime - 25 * 3600
    os.utime(first.failed_marker, (day_ago, day_ago))
    again = driver_archive("", env)
    assert again is not None and again.dump
    again.release()


@pytest.mark.usefixtures("spark_drivers")
def test_a_job_that_fails_has_no_archive_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's driver fails (a real spark-submit): nothing is written, and the next job may."""
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")  # not the tests' archive
    monkeypatch.setenv(DIR_VARIABLE, str(tmp_path / "archives"))
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit(3)")
    env_vars = {"PYSPARK_PYTHON": sys.executable, **driver_environment()}
    with pytest.raises(AirflowException):
        BaselineSubmitHook(env_vars=env_vars).submit(str(app))
    assert [p.name for p in (tmp_path / "archives").iterdir()] == [".dump.lock"]
    following = driver_archive("", {**os.environ, **env_vars})
    assert following is not None and following.dump
    following.release()


@pytest.mark.parametrize(
    ("java_options", "submit_options"),
    [
        ("-Xshare:off", ""),
        ("-XX:SharedArchiveFile=/opt/mine.jsa", ""),
        ("", "-XX:SharedArchiveFile=/opt/mine.jsa -Xlog:disable"),
        ("", "-XX:ArchiveClassesAtExit=/tmp/x.jsa"),
    ],
)
def test_a_job_with_its_own_class_sharing_is_left_alone(
    tmp_path: Path, java_options: str, submit_options: str
) -> None:
    env = _env(tmp_path, SPARK_SUBMIT_OPTS=submit_options)
    assert driver_archive(java_options, env) is None
    assert not list(tmp_path.iterdir())


def test_the_archive_is_off_unless_its_folder_is_named(tmp_path: Path) -> None:
    assert archive_dir({DIR_VARIABLE: "OFF"}) is None
    assert driver_archive("", _env(tmp_path, **{DIR_VARIABLE: "off"})) is None
    assert archive_dir({DIR_VARIABLE: str(tmp_path)}) == tmp_path
    # no default folder, in the cache or elsewhere: off in production
    assert archive_dir({"XDG_CACHE_HOME": str(tmp_path), "HOME": str(tmp_path)}) is None
    assert archive_dir({DIR_VARIABLE: " "}) is None
    env = {k: v for k, v in _env(tmp_path).items() if k != DIR_VARIABLE}
    assert driver_archive("", {**env, "XDG_CACHE_HOME": str(tmp_path)}) is None
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["a b", "it's", 'say "x"', "back\\slash"])
def test_a_folder_spark_would_split_gets_no_archive(tmp_path: Path, name: str) -> None:
    assert driver_archive("-Dx=1", _env(tmp_path / name)) is None
    assert not list(tmp_path.iterdir())


def test_an_unwritable_folder_or_a_dump_under_way_means_no_archive(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert driver_archive("", _env(blocked / "archives")) is None
    with open(tmp_path / ".dump.lock", "a") as lock:  # another job is writing it
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert driver_archive("", _env(tmp_path)) is None
    assert driver_archive("", _env(tmp_path)) is not None


def test_the_archive_belongs_to_one_jvm_and_class_path(tmp_path: Path) -> None:
    first = driver_archive("", _env(tmp_path))
    assert first is not None and first.lock is not None
    first.lock.close()
    other = driver_archive("", _env(tmp_path, SPARK_CONF_DIR="/etc/spark/conf"))
    assert other is not None and other.path != first.path
    assert other.lock is not None
    other.lock.close()


_APP = """
import os, sys
# the driver's JVM (spark-submit) runs this script as its child: does it map the archive, or
# was it asked to write one (which would fail the job when the JVM cannot)?
maps = open(f"/proc/{os.getppid()}/maps").read()
command = open(f"/proc/{os.getppid()}/cmdline").read()
assert "ArchiveClassesAtExit" not in command, "a job's own driver writes the archive"
open(sys.argv[1], "w").write("mapped" if sys.argv[2] in maps else "not mapped")
"""


@pytest.mark.usefixtures("spark_drivers")
def test_real_drivers_write_then_map_the_archive_and_a_bad_one_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """spark-submit through the hook, as the operators do: the first job's driver neither maps
    nor writes an archive (``_APP`` checks its JVM's options); once it has succeeded, the
    archive's own driver writes it in the background, the next job maps it and does not write
    it again, and an archive that does not fit the JVM is passed over (the job runs). A JVM
    that fails to write the archive: ``test_a_failed_write_is_logged_and_tried_again_a_day_later``."""
    folder = tmp_path / "archives"
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")  # not the tests' archive
    monkeypatch.setenv(DIR_VARIABLE, str(folder))
    env_vars = {"PYSPARK_PYTHON": sys.executable, **driver_environment()}
    app = tmp_path / "app.py"
    app.write_text(_APP)

    def run(name: str) -> str:
        out = tmp_path / f"{name}.txt"
        BaselineSubmitHook(application_args=[str(out), str(folder)], env_vars=env_vars).submit(str(app))
        return out.read_text()

    assert run("first") == "not mapped"
    assert caplog.text.count("in the background") == 1
    [log_file] = folder.glob(".spark-driver-*.log")
    archive = folder / log_file.name[1:].replace(".log", ".jsa")
    _wait_for(archive)
    assert "saved the Spark driver's classes" in log_file.read_text()
    assert archive.stat().st_size > 1_000_000
    assert run("second") == "mapped"
    assert caplog.text.count("in the background") == 1  # written once
    archive.chmod(0o644)
    archive.write_bytes(b"not an archive")
    assert run("third") == "not mapped"  # found unfit and passed over: the job runs


@pytest.mark.parametrize("variable", ["SPARK_CONF_DIR", "HADOOP_CONF_DIR", "SPARK_DIST_CLASSPATH"])
def test_a_class_path_folder_with_files_means_no_archive(tmp_path: Path, variable: str) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    empty = driver_archive("", _env(tmp_path / "archives", **{variable: str(folder)}))
    assert empty is not None and empty.lock is not None
    empty.lock.close()
    (folder / "settings.xml").write_text("<configuration/>")
    assert driver_archive("", _env(tmp_path / "archives", **{variable: str(folder)})) is None
    home = _env(tmp_path / "archives")  # no SPARK_CONF_DIR: the distribution's conf folder
    assert Path(home["SPARK_HOME"], "conf") in class_path_folders(home)
    extra = f"/opt/jars/*{os.pathsep}{folder}"
    assert driver_archive("", _env(tmp_path / "other"), driver_class_path=extra) is None


@pytest.mark.usefixtures("spark_drivers")
def test_real_drivers_with_a_configuration_folder_run_without_an_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spark configuration folder with a file in it (spark-submit puts it on the driver's
    class path): the JVM cannot write or map an archive then, so none is asked for and both
    jobs succeed (before, the first failed at exit after its work was done)."""
    folder, conf = tmp_path / "archives", tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")  # not the tests' archive
    monkeypatch.setenv(DIR_VARIABLE, str(folder))
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    app = tmp_path / "app.py"
    app.write_text(_APP)
    for name in ("first", "second"):
        out = tmp_path / f"{name}.txt"
        BaselineSubmitHook(
            application_args=[str(out), str(folder)],
            env_vars={"PYSPARK_PYTHON": sys.executable, **driver_environment()},
        ).submit(str(app))
        assert out.read_text() == "not mapped"
    assert not list(folder.glob("*.jsa"))
