"""Airflow hooks of pgsync: all I/O with the source database."""

from airflow_provider_pgsync.hooks.replication import PgReplicationHook

__all__ = ["PgReplicationHook"]
