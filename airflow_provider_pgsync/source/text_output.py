"""The session settings that shape PostgreSQL's text output of values, fixed wherever pgsync
reads values as text (capture's peek: pgoutput sends the decoding session's text output; the
baseline's COPY into a replica or a custom destination), whatever the database's or the
role's defaults: every destination then gets the same text for a value (ISO dates, UTC
offsets, exact floats, hex bytea), from a change or from a baseline."""

from __future__ import annotations

TEXT_OUTPUT = (
    "SET LOCAL TimeZone = 'UTC'",
    "SET LOCAL DateStyle = 'ISO'",
    "SET LOCAL IntervalStyle = 'postgres'",
    "SET LOCAL extra_float_digits = 3",
    "SET LOCAL bytea_output = 'hex'",
    "SET LOCAL client_encoding = 'UTF8'",
)
"""Statements for the start of a transaction (``SET LOCAL``: they end with it)."""
