"""The pgsync status page as an Airflow 3 plugin: a FastAPI app under the API server and a
menu entry in the UI that shows it in an iframe.

The app is mounted at ``/pgsync``; the page is ``/pgsync/status`` (HTML) and needs an
authenticated Airflow user (the UI's ``_token`` cookie or an ``Authorization: Bearer`` token),
like the UI's own views: a browser without one is sent to the login page, any other client gets
401. The page shows the pipelines whose DAGs the user may read (``access``). The menu entry
"pgsync status" opens ``/plugin/pgsync-status`` in the UI.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

URL_PREFIX = "/pgsync"
STATUS_PATH = "/status"


def create_app() -> FastAPI:
    """The plugin's FastAPI app: ``GET /status`` renders the status page for the request's user."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    from airflow_provider_pgsync.plugins.access import AuthManagerAccess
    from airflow_provider_pgsync.plugins.collect import collect_page
    from airflow_provider_pgsync.plugins.render import render_page

    app = FastAPI(title="pgsync status", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def login_first(request: Request, exc: HTTPException) -> Response:
        """A browser without a session goes to Airflow's login page, then back here."""
        if exc.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), 307)
        return await http_exception_handler(request, exc)

    # a sync endpoint: FastAPI runs it in a worker thread, so its blocking I/O never stalls the server;
    # GetUserDep is imported at module level: FastAPI resolves the (string) annotation there
    @app.get(
        STATUS_PATH,
        response_class=HTMLResponse,
        dependencies=[Depends(requires_access_view(AccessView.WEBSITE))],
    )
    def status(user: GetUserDep) -> HTMLResponse:
        page = collect_page(access=AuthManagerAccess(user))
        return HTMLResponse(render_page(page), headers={"Cache-Control": "no-store"})

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
