"""Helpers for testing code built on pgsync (e.g. the destination test kit)."""
