"""Test-only: turns pgsync's pause points on in every process of the test deployment.

The deployment's components start with this folder on ``PYTHONPATH``, so Python imports this
module at start-up (``site``); pgsync itself reads no variable for it (``failpoints``)."""

import os

folder = os.environ.get("PGSYNC_TEST_PAUSE_DIR")
if folder:
    from airflow_provider_pgsync import failpoints

    failpoints.pause_in(folder)
