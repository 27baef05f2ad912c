"""``/tiering/metrics``: the Prometheus exposition of the metadata store.

Computed from the store alone (``collect_metrics``, rendered by ``tiering_core.monitoring.exposition``):
it works on the API server, which has no log dirs, reflects every broker, and its counters are the
store's, so they survive every restart of the serving process.

Access is the page's, or a scraper's static token: an Airflow user allowed to see plugin views (a
JWT as ``Authorization: Bearer`` or in the UI's ``_token`` cookie), or ``Authorization: Bearer
<token>`` with the token of the config's ``metrics:`` section (a Prometheus server has no Airflow
login). No credentials: 401; a bearer that is neither the token nor a valid Airflow JWT: 401; an
Airflow user without plugin access: 403. The token is compared in constant time and never logged.

The API server also has Airflow's own database at hand: each scrape adds, for every DAG of the
platform (tagged ``tiering``) that has finished a run, whether its latest finished run failed
(``dag_run_failed``), so a failed run can page like the tier's own figures.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tiering_airflow.hooks.tiering import resolve_config_path
from tiering_airflow.ui.failures import latest_finished_runs
from tiering_airflow.ui.reads import DEFAULT_READ_TIMEOUT, StoreUnavailable, read_store
from tiering_core.monitoring.exposition import CONTENT_TYPE

if TYPE_CHECKING:
    from tiering_core.context import TieringContext

log = logging.getLogger(__name__)

#: The route, under the plugin's ``/tiering``.
METRICS_PATH = "/metrics"
#: How long one scrape may spend reading the store (seconds), as the page's reads.
DEFAULT_METRICS_TIMEOUT = DEFAULT_READ_TIMEOUT
_bearer = HTTPBearer(auto_error=False)


def latest_dag_runs() -> dict[str, bool]:
    """Each platform DAG with a finished run, and whether its latest finished run (by end date,
    ``failures.latest_finished_runs``) failed, from Airflow's database; empty, with a warning,
    when that database cannot be read (the tier's figures are still served)."""
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from sqlalchemy.exc import SQLAlchemyError

    try:
        with create_session() as session:
            rows = session.execute(latest_finished_runs()).all()
    except SQLAlchemyError as exc:
        log.warning("/tiering/metrics: Airflow's DAG runs could not be read: %s", type(exc).__name__)
        return {}
    failed: dict[str, bool] = {}
    for dag_id, _, state in rows:  # two runs ending at the same instant: a failure among them counts
        failed[dag_id] = failed.get(dag_id, False) or state == DagRunState.FAILED
    return failed


def read_exposition(config_path: str | None, topic: str | None = None, timeout: float = DEFAULT_METRICS_TIMEOUT) -> str:
    """The exposition, read now within ``timeout`` seconds: a store that does not answer makes the
    scrape fail (503) instead of hanging the API server."""
    from tiering_core.metadata.listing import collector_paused
    from tiering_core.monitoring import collect
    from tiering_core.monitoring.exposition import render

    def exposition(ctx: TieringContext) -> str:
        # The snapshot is built, rendered and dropped with the collector paused: its hundred
        # thousand objects never meet a collection, which would walk them, promote them to the
        # oldest generation and so trigger full collections of the whole server's heap.
        with collector_paused:
            snapshot = collect.collect_metrics(ctx, topic=topic, tasks=False)
            snapshot.dag_runs = latest_dag_runs()
            return render(snapshot)

    return read_store(config_path, exposition, timeout)


def scraper_token(config_path: str | None) -> str | None:
    """The config's static token for scrapers, read now; None when there is none or it cannot be
    read (then only Airflow's authentication is accepted, and the log says why, not the token)."""
    from tiering_core.config import load_config
    from tiering_core.errors import TieringError

    try:
        return load_config(resolve_config_path(config_path)).metrics.bearer_token()
    except TieringError as exc:
        log.warning("/tiering/metrics: the scrapers' bearer token is not available: %s", exc)
        return None


def _unauthenticated(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


def metrics_access(config_path: str | None) -> Callable[..., Awaitable[None]]:
    """The route's dependency: the scrapers' token, or Airflow's user with access to plugin views."""

    async def check(request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
        from airflow.api_fastapi.core_api.security import get_user

        presented = bearer is not None and bearer.scheme.lower() == "bearer"
        if presented:
            assert bearer is not None
            token = await run_in_threadpool(scraper_token, config_path)
            if token is not None and hmac.compare_digest(bearer.credentials.encode(), token.encode()):
                return
        try:
            user = await get_user(request, None, bearer if presented else None)
        except HTTPException as exc:
            if presented or exc.status_code == 401:
                raise _unauthenticated(
                    "not authenticated: neither the scrapers' token nor a valid Airflow token"
                ) from None
            raise  # a forged cookie: Airflow's own answer, as on the page
        if not get_auth_manager().is_authorized_view(access_view=AccessView.PLUGINS, user=user):
            raise HTTPException(status_code=403, detail="Forbidden")

    return check


def metrics_router(config_path: str | None = None, timeout: float = DEFAULT_METRICS_TIMEOUT) -> APIRouter:
    """The ``/metrics`` route; ``config_path=None`` resolves the config on each scrape."""
    router = APIRouter()

    @router.get(METRICS_PATH, dependencies=[Depends(metrics_access(config_path))], response_class=Response)
    def metrics(topic: str | None = Query(None, description="only this topic")) -> Response:
        try:
            return Response(read_exposition(config_path, topic, timeout), media_type=CONTENT_TYPE)
        except StoreUnavailable as exc:
            return Response(f"tiering metrics unavailable: {exc}\n", status_code=503, media_type="text/plain")

    return router
