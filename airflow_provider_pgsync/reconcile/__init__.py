"""Reconciliation: whether a destination still equals its source, and which rows differ.

Pure logic (no Airflow, no psycopg): canonical row text and digests (``canonical``), the
bucket bisection over two sides (``compare``), the keys left out (``touched``) and the
result model (``result``). ``hooks/reconcile_pg.py`` and ``spark/reconcile_job.py`` read the
sides; ``operators/reconcile.py`` runs it.
"""
