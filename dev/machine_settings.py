"""The development machine's Spark driver settings: opt-in, never pgsync's defaults.

Two settings make the drivers pgsync starts on a small machine start sooner, and ``make demo``,
``make airflow``, the benchmarks and the tests turn both on through ``use``:

- the JIT's quick tier alone (``-XX:TieredStopAtLevel=1`` in ``SPARK_SUBMIT_OPTS``, which
  spark-submit gives every driver JVM it starts): most of a test-sized job's driver work is
  short-lived code, for which the optimising tier costs more CPU than it saves on 2 cores;
- the drivers' class archive (``PGSYNC_SPARK_CLASS_ARCHIVE_DIR``, here ``.dev/spark-cds``):
  written once by a background driver after the first job, mapped by every later one.

Both are described, with their figures, in DEVELOPMENT.md. A production worker sets either the
same way when it wants it.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from pgcluster import REPO

QUICK_JIT = "-XX:TieredStopAtLevel=1"
JIT_OPTIONS = ("-XX:TieredStopAtLevel", "-XX:+TieredCompilation", "-XX:-TieredCompilation", "-Xint", "-Xcomp")
"""Options by which the environment chooses a JIT already: it is left alone then."""
ARCHIVE_DIR = REPO / ".dev" / "spark-cds"
ARCHIVE_VARIABLE = "PGSYNC_SPARK_CLASS_ARCHIVE_DIR"
"""``spark_class_archive.DIR_VARIABLE``, written out: importing the package's hooks imports
Airflow, which must not happen here before a caller has set AIRFLOW_HOME."""


def with_quick_jit(options: str) -> str:
    """``SPARK_SUBMIT_OPTS`` ``options`` with the quick tier added, unless they choose a JIT."""
    if any(word.startswith(JIT_OPTIONS) for word in options.split()):
        return options
    return f"{options} {QUICK_JIT}".strip()


def use(environ: MutableMapping[str, str] = os.environ) -> None:
    """Turn both settings on in ``environ`` (this process's by default), keeping a JIT or an
    archive folder it chose already."""
    environ["SPARK_SUBMIT_OPTS"] = with_quick_jit(environ.get("SPARK_SUBMIT_OPTS", ""))
    environ.setdefault(ARCHIVE_VARIABLE, str(ARCHIVE_DIR))
