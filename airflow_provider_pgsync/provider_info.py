"""What Airflow's providers manager learns about pgsync (the ``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

from airflow_provider_pgsync import __version__


def get_provider_info() -> dict[str, Any]:
    """Provider metadata: the package, its hooks, operators, sensors, triggers and UI plugin."""
    return {
        "package-name": "airflow-provider-pgsync",
        "name": "pgsync",
        "description": "Change-data-capture from PostgreSQL logical replication into a lakehouse "
        "or another database, orchestrated by Airflow.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "pgsync",
                "external-doc-url": "https://www.postgresql.org/docs/current/logical-replication.html",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "pgsync",
                "python-modules": ["airflow_provider_pgsync.hooks.replication"],
            }
        ],
        "operators": [
            {
                "integration-name": "pgsync",
                "python-modules": [
                    "airflow_provider_pgsync.operators.replication",
                    "airflow_provider_pgsync.operators.capture",
                    "airflow_provider_pgsync.operators.baseline",
                    "airflow_provider_pgsync.operators.backfill",
                    "airflow_provider_pgsync.operators.apply",
                    "airflow_provider_pgsync.operators.compact",
                    "airflow_provider_pgsync.operators.reconcile",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "pgsync",
                "python-modules": [
                    "airflow_provider_pgsync.sensors.pending_changes",
                    "airflow_provider_pgsync.sensors.slot_lag",
                    "airflow_provider_pgsync.sensors.table_phase",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "pgsync",
                "python-modules": [
                    "airflow_provider_pgsync.triggers.pending_changes",
                    "airflow_provider_pgsync.triggers.pending_changes_event",
                    "airflow_provider_pgsync.triggers.slot_lag",
                    "airflow_provider_pgsync.triggers.table_phase",
                ],
            }
        ],
        "plugins": [
            {
                "name": "pgsync_status",
                "plugin-class": "airflow_provider_pgsync.plugins.plugin.PgsyncStatusPlugin",
            }
        ],
    }
