"""The pgsync status page in the Airflow UI, as an Airflow 3 plugin.

- ``status``: the page's view model (pure values and the rules that derive them)
- ``render``: the view model as HTML with an inline SVG chart (everything escaped)
- ``collect``: reading the figures (pipeline config, state, source, Airflow's metadata DB)
- ``access``: who sees which pipeline (Airflow's auth manager, on the pipeline's DAGs)
- ``plugin``: the FastAPI app under the API server and the ``AirflowPlugin`` with its menu entry
"""
