"""Drop-in Airflow DAG file of pgsync: every DAG of every pipeline in a YAML config.

Copy this file (and a config) into the Airflow dags folder. The config is ``$PGSYNC_CONFIG``,
else ``pgsync.yaml`` next to this file; the DAGs of each pipeline ``<name>`` are
``pgsync_<name>_setup``, ``_baseline``, ``_cdc``, ``_compact`` and ``_teardown``
(``airflow_provider_pgsync.dags``). A config error fails the import of this file with every
problem listed, each with its key path.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_provider_pgsync.dags import build_dags

PGSYNC_CONFIG = os.environ.get("PGSYNC_CONFIG") or str(Path(__file__).with_name("pgsync.yaml"))

globals().update(build_dags(PGSYNC_CONFIG))
