"""Who sees what on the status page, decided by Airflow's auth manager for the user of the request.

A pipeline is shown to a user who may read **every** DAG of the pipeline (``GET`` on each of
``pgsync_<name>_setup``, ``_baseline``, ``_cdc``, ``_compact`` when it has a lake destination,
``_teardown``), asked exactly as Airflow's own DAG views ask: ``is_authorized_dag`` with the DAG's
team when the DAG's bundle belongs to one (multi-team mode). The page shows what all of those
DAGs do (the state they write, the errors they record, the capture runs' XComs), so reading one
of them is not enough. A pipeline the user may not read is left out before anything about it is
read, so neither its name, tables, figures nor errors reach the page.

The details of a pipeline config that cannot be loaded (its path, the loader's message, which
may name any pipeline) are shown to users who may read Airflow's configuration only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import BaseAuthManager

    from airflow_provider_pgsync.pipeline import PipelineConfig

DAG_KINDS = ("setup", "baseline", "cdc", "compact", "reconcile", "teardown")
"""The kinds of DAG the DAG factory builds for a pipeline (``compact`` only with a lake destination)."""


def pipeline_dag_ids(config: PipelineConfig) -> tuple[str, ...]:
    """The ids of the DAGs the DAG factory builds for ``config`` (``dags.factory.pipeline_dags``)."""
    kinds = [k for k in DAG_KINDS if k != "compact" or config.lake_destinations]
    return tuple(f"pgsync_{config.name}_{kind}" for kind in kinds)


class Access(Protocol):
    """What the user of one request may see on the status page."""

    def may_read_pipeline(self, config: PipelineConfig) -> bool:
        """Whether the user may see pipeline ``config`` (its name and everything about it)."""
        ...

    def may_read_config(self) -> bool:
        """Whether the user may see the pipeline config's path and why it cannot be loaded."""
        ...


@dataclass(frozen=True)
class FullAccess:
    """Everything is visible: for callers outside a request (the CLI, tests), never for a web user."""

    def may_read_pipeline(self, config: PipelineConfig) -> bool:
        return True

    def may_read_config(self) -> bool:
        return True


@dataclass(frozen=True)
class AuthManagerAccess:
    """The permissions of ``user`` as Airflow's auth manager (the configured one by default) grants them."""

    user: Any
    auth_manager: BaseAuthManager[Any] | None = None

    def _manager(self) -> BaseAuthManager[Any]:
        if self.auth_manager is not None:
            return self.auth_manager
        from airflow.api_fastapi.app import get_auth_manager

        return get_auth_manager()

    def may_read_pipeline(self, config: PipelineConfig) -> bool:
        from airflow.api_fastapi.auth.managers.models.batch_apis import IsAuthorizedDagRequest
        from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
        from airflow.models.dag import DagModel

        dag_ids = pipeline_dag_ids(config)
        # a DAG's team is its bundle's (multi-team mode); a DAG not stored (yet) has none, and
        # the auth manager then decides on the DAG id alone, as for Airflow's own DAG views
        teams = DagModel.get_dag_id_to_team_name_mapping(list(dag_ids))
        requests: list[IsAuthorizedDagRequest] = [
            {"method": "GET", "details": DagDetails(id=dag_id, team_name=teams.get(dag_id))}
            for dag_id in dag_ids
        ]
        return self._manager().batch_is_authorized_dag(requests, user=self.user)

    def may_read_config(self) -> bool:
        return self._manager().is_authorized_configuration(method="GET", user=self.user)
