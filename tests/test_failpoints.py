"""Fail and pause points are inert unless the process arms them itself: no environment variable
or file makes a production task exit or wait (``failpoints``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_pgsync.failpoints import EXIT_CODE, PAUSE_POINTS, POINTS

_REACH_EVERY_POINT = """
import sys
from airflow_provider_pgsync import failpoints
if sys.argv[1] != "-":
    failpoints.arm(sys.argv[1])
if sys.argv[2] != "-":
    failpoints.pause_in(sys.argv[2])
for name in failpoints.POINTS:
    failpoints.fail_point(name)
for name in failpoints.PAUSE_POINTS:
    failpoints.pause_point(name)
print("passed every point")
"""


def _command(fail: str = "-", pauses: str = "-") -> list[str]:
    """A child that arms ``fail`` and turns pause points on in ``pauses`` ("-": neither), then
    passes every point."""
    return [sys.executable, "-c", _REACH_EVERY_POINT, fail, pauses]


def _reach(tmp_path: Path, fail: str = "-", **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``_command(fail)`` with nothing of this environment but ``PATH`` and ``env``."""
    return subprocess.run(
        _command(fail),
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_no_variable_or_file_arms_a_point(tmp_path: Path) -> None:
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    for name in PAUSE_POINTS:
        (pauses / name).touch()
    # the variables that armed them before they became in-process only, and any like them
    env = {
        "PGSYNC_FAIL_POINT": POINTS[0],
        "PGSYNC_PAUSE_DIR": str(pauses),
        "PGSYNC_TEST_PAUSE_DIR": str(pauses),
    }
    done = _reach(tmp_path, **env)
    assert done.returncode == 0 and "passed every point" in done.stdout, done.stderr
    assert all((pauses / name).exists() for name in PAUSE_POINTS), "a pause point took its file"


@pytest.mark.parametrize("point", POINTS)
def test_a_point_armed_in_the_process_kills_it(tmp_path: Path, point: str) -> None:
    done = _reach(tmp_path, fail=point)
    assert done.returncode == EXIT_CODE, done.stderr
    assert "passed every point" not in done.stdout


def test_a_pause_point_turned_on_in_the_process_waits_once_until_killed(tmp_path: Path) -> None:
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    point = PAUSE_POINTS[0]
    (pauses / point).touch()
    child = subprocess.Popen(_command(pauses=str(pauses)), stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (pauses / f"{point}.pid").exists():
            assert child.poll() is None, "the child passed the armed pause point"
            assert time.monotonic() < deadline, "the child never reached the pause point"
            time.sleep(0.05)  # polling the child's pid file, with a deadline
        assert (pauses / f"{point}.pid").read_text() == str(child.pid)
        assert not (pauses / point).exists(), "the pause point kept its file: the retry would wait too"
        assert child.poll() is None
    finally:
        child.kill()
        child.wait(timeout=60)
    # its retry passes: the file was taken
    assert subprocess.run(_command(pauses=str(pauses)), timeout=60, check=False).returncode == 0


def test_an_unknown_point_is_refused() -> None:
    from airflow_provider_pgsync import failpoints

    with pytest.raises(ValueError, match="no fail point 'after_lunch': choose one of after_peek"):
        failpoints.arm("after_lunch")
    assert failpoints.armed() is None
