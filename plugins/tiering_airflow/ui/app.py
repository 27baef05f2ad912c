"""The Tiering page: every topic's tiering from the metadata store, as HTML and as JSON.

Mounted by the Airflow plugin under ``/tiering``; each request reads the store as it is at that
moment, so the page works on an API server without log dirs and shows every broker: the page asks
only for what it shows (its first screen: ``collect_health`` and the failing runs from Airflow's own
database, ``failures.py``; ``collect_overview``: per-topic sums and the partitions in an alert state),
an opened topic's table and the JSON for its snapshot (``collect_metrics``), a chart for its points
(``topic_series``). ``view.py`` renders it. Links are relative so the page also works when Airflow
is served under a path prefix.

Every page route requires an Airflow user allowed to see plugin views, authenticated the way the
rest of Airflow's API is: a JWT as ``Authorization: Bearer`` (REST clients) or in the ``_token``
cookie that Airflow's UI sets at login (the page inside the UI). Anonymous requests get 401,
users without the permission 403: the page names topics and sizes, which are not public.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, HTMLResponse, Response

from tiering_airflow.dag_ids import dag_ids_of
from tiering_airflow.hooks.tiering import named_topics
from tiering_airflow.ui import view
from tiering_airflow.ui.erasures import LAST_ERASURES
from tiering_airflow.ui.failures import FailedTask, concerns, failed_tasks
from tiering_airflow.ui.health import broker_filter, copy_history_dict, grafana_link, render_health
from tiering_airflow.ui.metrics import metrics_router
from tiering_airflow.ui.reads import DEFAULT_READ_TIMEOUT, StoreUnavailable, read_store, within

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.erasures import ErasureRecord, TableErasureRecord
    from tiering_core.metadata.values import ReplayRecord
    from tiering_core.monitoring.health import Health
    from tiering_core.monitoring.overview import Overview
    from tiering_core.monitoring.snapshot import MetricsSnapshot, SeriesPoint

#: How long one request may spend reading the store (seconds).
DEFAULT_STATUS_TIMEOUT = DEFAULT_READ_TIMEOUT

log = logging.getLogger(__name__)

#: The files under ``static/`` the page loads (served by name, nothing else from that folder).
STATIC = Path(__file__).with_name("static")
STATIC_TYPES = {
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "tiering.js": "text/javascript",
    "tiering.css": "text/css",
}


def read_snapshot(
    config_path: str | None, topic: str | None = None, timeout: float = DEFAULT_STATUS_TIMEOUT
) -> tuple[MetricsSnapshot, frozenset[str]]:
    """The store's snapshot (of one topic, or all) and the topics the config names."""
    import tiering_core.monitoring.collect as collect

    def read(ctx: TieringContext) -> tuple[MetricsSnapshot, frozenset[str]]:
        return collect.collect_metrics(ctx, topic=topic), named_topics(ctx.config)

    return read_store(config_path, read, timeout)


def read_replays(config_path: str | None, timeout: float = DEFAULT_STATUS_TIMEOUT) -> list[ReplayRecord]:
    """The last replays into Kafka topics, newest first (``view.LAST_REPLAYS`` of them)."""
    return read_store(config_path, lambda ctx: ctx.metadata.recent_replays(view.LAST_REPLAYS), timeout)


def read_erasures(
    config_path: str | None, timeout: float = DEFAULT_STATUS_TIMEOUT
) -> tuple[list[ErasureRecord], list[TableErasureRecord]]:
    """The last erasures by record key of partitions and of export tables, newest first
    (``erasures.LAST_ERASURES`` of each)."""

    def read(ctx: TieringContext) -> tuple[list[ErasureRecord], list[TableErasureRecord]]:
        return ctx.metadata.erasures(limit=LAST_ERASURES), ctx.metadata.table_erasures(limit=LAST_ERASURES)

    return read_store(config_path, read, timeout)


def read_overview(config_path: str | None, timeout: float = DEFAULT_STATUS_TIMEOUT) -> tuple[Overview, dict[str, str]]:
    """The page's top: every topic's summary and the partitions in an alert state; and the topics
    (named in the config or in the store) that the config says are not tiered, with why."""
    import tiering_core.monitoring.overview as overview

    def read(ctx: TieringContext) -> tuple[Overview, dict[str, str]]:
        found = overview.collect_overview(ctx)
        topics = named_topics(ctx.config) | {s.topic for s in found.topics}
        reasons = {topic: ctx.config.not_tiered_reason(topic) for topic in topics}
        return found, {topic: reason for topic, reason in reasons.items() if reason is not None}

    return read_store(config_path, read, timeout)


@dataclass(frozen=True, slots=True)
class FirstScreen:
    """What the page's first screen reads from the store and the config: the health figures (of
    one broker's replicas, or all), the brokers to filter by and the Grafana to link to."""

    health: Health
    brokers: list[int]
    grafana_url: str | None
    #: The DAG ids of the topic asked for (none without one).
    topic_dags: tuple[str, ...] = ()


def read_first_screen(
    config_path: str | None, broker: int | None, topic: str | None = None, timeout: float = DEFAULT_STATUS_TIMEOUT
) -> FirstScreen:
    """The first screen's figures (``monitoring.health``; one broker's or topic's if asked), the
    brokers (the config's, else those observed), the Grafana to link to and the topic's DAG ids."""
    import tiering_core.monitoring.health as health

    def read(ctx: TieringContext) -> FirstScreen:
        found = health.collect_health(ctx, topic=topic, broker=broker)
        brokers = sorted(ctx.config.brokers) or ctx.metadata.observing_brokers()
        dags = dag_ids_of(topic, named_topics(ctx.config)) if topic is not None else ()
        return FirstScreen(found, brokers, ctx.config.metrics.grafana_url, dags)

    return read_store(config_path, read, timeout)


def read_failures(timeout: float = DEFAULT_STATUS_TIMEOUT) -> list[FailedTask] | None:
    """The failing runs from Airflow's database; None when it cannot be read in time (the page
    says so; the rest of it still shows)."""
    try:
        return within(timeout, failed_tasks)
    except Exception as exc:  # the page shows what it can: a broken Airflow database is its own alert
        log.warning("Tiering page: Airflow's failed task instances cannot be read: %s", type(exc).__name__)
        return None


def read_series(
    config_path: str | None, topic: str, window: str, timeout: float = DEFAULT_STATUS_TIMEOUT
) -> list[SeriesPoint]:
    """A topic's chart points over ``window`` ("24h" or "7d")."""
    import tiering_core.monitoring.collect as collect

    return read_store(config_path, lambda ctx: collect.topic_series(ctx, topic, window), timeout)


def read_exported(
    config_path: str | None, topic: str, timeout: float = DEFAULT_STATUS_TIMEOUT
) -> dict[int, int] | None:
    """Per partition, the offset the topic's export table holds up to (empty without an ``export``
    section or a table); None when the catalog or table cannot be read (the page says so, the
    rest of it still shows)."""

    def read(ctx: TieringContext) -> dict[int, int] | None:
        from tiering_core.errors import ExportError
        from tiering_core.export import exported_offsets

        try:
            return exported_offsets(ctx, topic)
        except ExportError as exc:
            log.warning("Tiering page: the export table of %s cannot be read: %s", topic, exc)
            return None

    return read_store(config_path, read, timeout)


def json_response(value: Any) -> Response:
    """JSON encoded by msgspec (dataclasses included): FastAPI's encoder walks every value, too
    slow for 10,000 partitions."""
    return Response(msgspec.json.encode(value), media_type="application/json")


def plugin_view_access() -> Any:
    """The dependency every route runs: Airflow's own check for access to plugin views."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return Depends(requires_access_view(AccessView.PLUGINS))


def create_app(config_path: str | None = None, status_timeout: float = DEFAULT_STATUS_TIMEOUT) -> FastAPI:
    """The page and its JSON; ``config_path=None`` resolves the config on each request."""
    app = FastAPI(
        title="Kafka tiering",
        description="Tiering of every topic and partition, from the metadata store",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    # Airflow's access check is each page route's own: /metrics also takes the scrapers' token.
    app.include_router(metrics_router(config_path, status_timeout))
    access = [plugin_view_access()]

    @app.get("/api/partitions", dependencies=access)
    def partitions(topic: str | None = Query(None, description="only this topic")) -> Response:
        try:
            snapshot, _ = read_snapshot(config_path, topic, status_timeout)
        except StoreUnavailable as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from exc
        return json_response(snapshot.partitions)

    @app.get("/api/series", dependencies=access)
    def series(
        topic: str = Query(..., description="the topic"),
        window: str = Query("24h", pattern="^(24h|7d)$", description="24h (5-minute points) or 7d (hourly)"),
    ) -> Response:
        try:
            return json_response(view.series_dict(read_series(config_path, topic, window, status_timeout)))
        except StoreUnavailable as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from exc

    @app.get("/fragments/partitions", response_class=HTMLResponse, dependencies=access)
    def partition_table(
        topic: str = Query(..., description="the topic"),
        offset: int = Query(0, ge=0, description="the first row, by partition number"),
        limit: int = Query(view.PAGE_ROWS, ge=1, le=10_000, description="rows at most"),
        broker: int | None = Query(None, ge=0, description="only the partitions with a replica on this broker"),
    ) -> HTMLResponse:
        try:
            snapshot, named = read_snapshot(config_path, topic, status_timeout)
            exported = read_exported(config_path, topic, status_timeout)
        except StoreUnavailable as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from exc
        if broker is not None:
            snapshot.partitions = [p for p in snapshot.partitions if any(r.broker_id == broker for r in p.replicas)]
        return HTMLResponse(view.render_partitions(snapshot, named, offset, limit, exported))

    @app.get("/static/{name}", dependencies=access)
    def static(name: str) -> FileResponse:
        if name not in STATIC_TYPES:
            raise HTTPException(status_code=404)
        return FileResponse(
            STATIC / name, media_type=STATIC_TYPES[name], headers={"Cache-Control": "private, max-age=3600"}
        )

    @app.get("/", response_class=HTMLResponse, dependencies=access)
    def page(
        broker: int | None = Query(None, ge=0, description="one broker's replicas"),
        topic: str | None = Query(None, description="one topic's first screen (a topic's exact name)"),
    ) -> HTMLResponse:
        try:
            overview, not_tiered = read_overview(config_path, status_timeout)
            replays = read_replays(config_path, status_timeout)
            erasures, table_erasures = read_erasures(config_path, status_timeout)
            known = topic if topic in {s.topic for s in overview.topics} else None
            first = read_first_screen(config_path, broker, known, status_timeout)
        except StoreUnavailable as exc:
            return HTMLResponse(view.render_error(str(exc)), status_code=503)
        failures = read_failures(status_timeout)
        if known is not None and failures is not None:
            failures = [f for f in failures if concerns(f, known, first.topic_dags)]
        nav = broker_filter(first.brokers, broker) + grafana_link(first.grafana_url)
        grafana = {s.topic: grafana_link(first.grafana_url, s.topic) for s in overview.topics if first.grafana_url}
        return HTMLResponse(
            view.render_page(
                overview,
                not_tiered,
                replays,
                erasures,
                table_erasures=table_erasures,
                first=render_health(first.health, overview, failures, broker=broker, topic=known),
                nav=f"<div class='nav'>{nav}</div>" if nav else "",
                data={"copy_history": copy_history_dict(first.health), "broker": broker},
                topic_links=grafana,
            )
        )

    return app
