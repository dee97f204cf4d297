"""The pgsync status page as an Airflow 3 plugin: a FastAPI app under the API server and a
menu entry in the UI that shows it in an iframe.

The app is mounted at ``/pgsync``; the page is ``/pgsync/status`` (HTML) and needs an
authenticated Airflow user (the UI's session cookie or a bearer token), like the UI's own
views. The menu entry "pgsync status" opens ``/plugin/pgsync-status`` in the UI.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse

URL_PREFIX = "/pgsync"
STATUS_PATH = "/status"


def create_app() -> FastAPI:
    """The plugin's FastAPI app: ``GET /status`` renders the status page."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    from airflow_provider_pgsync.plugins.collect import collect_page
    from airflow_provider_pgsync.plugins.render import render_page

    app = FastAPI(title="pgsync status", docs_url=None, redoc_url=None, openapi_url=None)

    # a sync endpoint: FastAPI runs it in a worker thread, so its blocking I/O never stalls the server
    @app.get(
        STATUS_PATH,
        response_class=HTMLResponse,
        dependencies=[Depends(requires_access_view(AccessView.WEBSITE))],
    )
    def status() -> HTMLResponse:
        return HTMLResponse(render_page(collect_page()), headers={"Cache-Control": "no-store"})

    return app


class PgsyncStatusPlugin(AirflowPlugin):
    """The pgsync status page: pipelines, table phases, lag and errors, in the Airflow UI."""

    name = "pgsync_status"
    fastapi_apps: list[Any] = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "pgsync status"}]
    external_views: list[Any] = [
        {
            "name": "pgsync status",
            "href": URL_PREFIX.lstrip("/") + STATUS_PATH,  # relative: resolved against the UI's base URL
            "destination": "nav",
            "category": "browse",
            "url_route": "pgsync-status",
        }
    ]
