"""The development machine's Spark driver settings (dev/machine_settings.py): the quick JIT
unless the environment chose a JIT, and the class archive's folder unless it named one."""

from __future__ import annotations

import pytest

import machine_settings
from airflow_provider_pgsync.hooks.spark_class_archive import DIR_VARIABLE

QUICK = machine_settings.QUICK_JIT


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("", QUICK),
        ("-Xmx1g -XX:SharedArchiveFile=/a.jsa", f"-Xmx1g -XX:SharedArchiveFile=/a.jsa {QUICK}"),
        ("-XX:TieredStopAtLevel=4", "-XX:TieredStopAtLevel=4"),
        ("-Xmx1g -XX:-TieredCompilation", "-Xmx1g -XX:-TieredCompilation"),
        ("-Xint", "-Xint"),
    ],
)
def test_the_quick_jit_is_added_unless_a_jit_is_chosen(options: str, expected: str) -> None:
    environ = {"SPARK_SUBMIT_OPTS": options}
    machine_settings.use(environ)
    assert environ["SPARK_SUBMIT_OPTS"] == expected
    machine_settings.use(environ)  # twice is once
    assert environ["SPARK_SUBMIT_OPTS"] == expected


def test_the_archive_folder_is_the_checkout_s_unless_one_is_named() -> None:
    assert machine_settings.ARCHIVE_VARIABLE == DIR_VARIABLE
    environ: dict[str, str] = {}
    machine_settings.use(environ)
    assert environ == {"SPARK_SUBMIT_OPTS": QUICK, DIR_VARIABLE: str(machine_settings.ARCHIVE_DIR)}
    named = {DIR_VARIABLE: "off"}
    machine_settings.use(named)
    assert named[DIR_VARIABLE] == "off"
