"""Baselines: one table read in an exported snapshot by parallel ctid ranges (DESIGN §2 rule 5)."""
