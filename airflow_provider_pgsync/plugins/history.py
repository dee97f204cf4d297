"""What Airflow's metadata database records about a pipeline's destinations: when changes were
last applied to each destination table (its asset's latest event) and the latest
reconciliation (the reconcile DAG's XCom ``result``). Read only."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from airflow_provider_pgsync.plugins.reconciled import ReconcileRun, parse_result

RECONCILE_TASK = "reconcile"
RECONCILE_XCOM = "result"


def reconcile_dag_id(pipeline: str) -> str:
    """The id of a pipeline's reconcile DAG, whose ``reconcile`` task pushes XCom ``result``."""
    return f"pgsync_{pipeline}_reconcile"


def last_reconcile(dag_id: str) -> ReconcileRun | None:
    """The latest result the ``reconcile`` task of ``dag_id`` pushed (None: never reconciled)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.execute(
            select(XComModel.value, XComModel.run_id, XComModel.timestamp)
            .where(
                XComModel.dag_id == dag_id,
                XComModel.task_id == RECONCILE_TASK,
                XComModel.key == RECONCILE_XCOM,
                XComModel.map_index == -1,
            )
            .order_by(XComModel.timestamp.desc())
            .limit(1)
        ).first()
        if row is None:
            return None
        value = XComModel.deserialize_value(row)
        return parse_result(value, str(row.run_id), _aware(row.timestamp))


def last_events(uris: Iterable[str]) -> dict[str, datetime]:
    """The time of the latest asset event of each asset ``uris`` that has one."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    wanted = list(uris)
    if not wanted:
        return {}
    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri, func.max(AssetEvent.timestamp))
            .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri.in_(wanted))
            .group_by(AssetModel.uri)
        ).all()
    return {str(uri): _aware(at) for uri, at in rows if at is not None}


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
