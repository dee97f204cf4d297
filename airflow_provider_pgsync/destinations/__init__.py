"""Destinations of synced tables (DESIGN §5)."""
