"""Airflow operators of pgsync: thin orchestration over hooks and pure modules."""
