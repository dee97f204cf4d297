"""pgsync: orchestrated change-data-capture from PostgreSQL, as an Apache Airflow provider."""

from __future__ import annotations

__version__ = "0.1.0"
