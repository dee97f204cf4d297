"""The changelog: durable Parquet segments of captured changes, one table and schema version each."""

from __future__ import annotations

from airflow_provider_pgsync.changelog.prune import segments_to_prune
from airflow_provider_pgsync.changelog.schema import RESERVED, segment_schema
from airflow_provider_pgsync.changelog.segments import Changelog

__all__ = ["RESERVED", "Changelog", "segment_schema", "segments_to_prune"]
