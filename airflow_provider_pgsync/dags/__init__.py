"""The DAG factory: a pipeline config (YAML or Python) becomes the pipeline's DAGs.

``build_dags(pipelines)`` returns ``{dag_id: DAG}`` for every pipeline: setup, baseline, cdc,
compact (with a lake destination) and teardown; the repository's ``dags/pgsync.py`` is the
drop-in file that reads ``$PGSYNC_CONFIG``. Modules: ``factory`` (the DAGs), ``params``
(trigger-form Params and their checks), ``tasks`` (steps no operator covers), ``assets``
(an Asset per destination table and the apply operator that emits their events).
"""

from airflow_provider_pgsync.dags.assets import PgApplyAssetsOperator, destination_alias, table_asset
from airflow_provider_pgsync.dags.factory import build_dags, dag_id, pipeline_dags

__all__ = [
    "PgApplyAssetsOperator",
    "build_dags",
    "dag_id",
    "destination_alias",
    "pipeline_dags",
    "table_asset",
]
