"""The destination contract under its documented name: it lives in ``apply/destination.py`` (apply
defines what it writes to; destinations implement it), re-exported here for destinations written
against ``airflow_provider_pgsync.destinations.protocol``."""

from __future__ import annotations

from airflow_provider_pgsync.apply.backfill import TouchedKeys
from airflow_provider_pgsync.apply.destination import (
    Destination,
    SchemaAnswer,
    SchemaDecision,
    schema_decision,
)

__all__ = ["Destination", "SchemaAnswer", "SchemaDecision", "TouchedKeys", "schema_decision"]
