"""Airflow hooks of pgsync: all I/O with the source database, and the state's stores and their lock."""

from airflow_provider_pgsync.hooks.replication import PgReplicationHook

__all__ = ["PgReplicationHook"]
