"""The Tiering page: every partition's tier state as an HTML table and as JSON.

Mounted by the Airflow plugin under ``/tiering``; each request reads the live state with
``collect_status`` (the same rows as ``tiering status --json``). Links are relative so the
page also works when Airflow is served under a path prefix.

Every page route requires an Airflow user allowed to see plugin views, authenticated the way the
rest of Airflow's API is: a JWT as ``Authorization: Bearer`` (REST clients) or in the ``_token``
cookie that Airflow's UI sets at login (the page inside the UI). Anonymous requests get 401,
users without the permission 403: the page names topics and sizes, which are not public.
"""

from __future__ import annotations

import html
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse

from tiering_airflow.hooks.tiering import TieringHook
from tiering_airflow.ui.metrics import metrics_router

# (status field, column title): the tier-state fields an operator watches.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("partition", "Partition"),
    ("log_start_offset", "Log start"),
    ("last_stable_offset", "LSO"),
    ("log_end_offset", "Log end"),
    ("highest_copied_offset", "Highest copied offset"),
    ("copy_lag_segments", "Copy lag (segments)"),
    ("copy_lag_bytes", "Copy lag (bytes)"),
    ("local_retention_risk", "Local-retention risk"),
    ("remote_segments", "Remote segments"),
    ("remote_bytes", "Remote bytes"),
    ("delete_state", "Delete state"),
    ("gaps", "Tiering gaps"),
)

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#1d2733}"
    "table{border-collapse:collapse;font-size:13px}"
    "th{background:#eef2f6;position:sticky;top:0}"
    "td,th{border:1px solid #cfd8e3;padding:3px 8px;text-align:right;white-space:nowrap}"
    "td:first-child,th:first-child{text-align:left}"
    "tr.alert{background:#fde2e2}tr.removed{color:#6b7785}.ok{color:#2f7d32}.bad{color:#b3261e;font-weight:600}"
)


#: How long one request may spend reading the tier state (seconds).
DEFAULT_STATUS_TIMEOUT = 30.0
#: Reads in progress at once: a log dir that hangs holds at most these threads, never the server.
_READERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tiering-status")


class StatusUnavailable(Exception):
    """The state could not be read (no or bad config, unreadable log dir, store down, too slow)."""


def _read_status_now(config_path: str | None, topic: str | None) -> list[dict[str, Any]]:
    from tiering_core.errors import TieringError
    from tiering_core.tier.status import collect_status

    try:
        with TieringHook(config_path=config_path).get_conn() as ctx:
            return [row.to_dict() for row in collect_status(ctx, topic=topic)]
    except TieringError as exc:
        raise StatusUnavailable(str(exc)) from exc


def read_status(
    config_path: str | None, topic: str | None = None, timeout: float = DEFAULT_STATUS_TIMEOUT
) -> list[dict[str, Any]]:
    """The status rows, read now, within ``timeout`` seconds: a log dir that hangs (an unresponsive
    network mount) makes the page say so instead of hanging the request."""
    future = _READERS.submit(_read_status_now, config_path, topic)
    try:
        return future.result(timeout=timeout)
    except FutureTimeout as exc:
        future.cancel()
        raise StatusUnavailable(
            f"reading the tier state did not finish within {timeout:.0f} s (a log dir or the metadata store "
            "does not answer)"
        ) from exc


def _cell(key: str, row: dict[str, Any]) -> tuple[str, str]:
    """(text, css class) of one cell."""
    value = row.get(key)
    if key == "partition":
        return f"{row['topic']}-{row['partition']}", ""
    if key == "local_retention_risk":
        if not value:
            return "-", ""
        return ("AT RISK: " + str(value.get("reason")), "bad") if value.get("at_risk") else ("ok", "ok")
    if key == "gaps":
        return (", ".join(f"{start}..{end}" for start, end in value), "bad") if value else ("none", "ok")
    if key in ("copy_lag_segments", "copy_lag_bytes") and value:
        return f"{value:,}", "bad" if (row.get("local_retention_risk") or {}).get("at_risk") else ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if key.endswith("bytes") else str(value), ""
    return ("-" if value is None else str(value)), ""


def _row_html(row: dict[str, Any]) -> str:
    alert = bool(row.get("gaps")) or bool((row.get("local_retention_risk") or {}).get("at_risk")) or row.get("error")
    css = "alert" if alert else ("removed" if not row.get("on_broker", True) else "")
    cells = []
    for key, _ in COLUMNS:
        text, cls = _cell(key, row)
        cells.append(f'<td class="{cls}">{html.escape(text)}</td>' if cls else f"<td>{html.escape(text)}</td>")
    note = row.get("error") or ("" if row.get("on_broker", True) else "not on this broker (remote data only)")
    cells.append(f"<td>{html.escape(str(note))}</td>")
    return f'<tr class="{css}">' + "".join(cells) + "</tr>"


def render_page(rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in COLUMNS) + "<th>Note</th>"
    at_risk = sum(1 for r in rows if (r.get("local_retention_risk") or {}).get("at_risk"))
    with_gaps = sum(1 for r in rows if r.get("gaps"))
    lag = sum(int(r.get("copy_lag_segments") or 0) for r in rows)
    remote = sum(int(r.get("remote_bytes") or 0) for r in rows)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Tiering</title>"
        f"<meta http-equiv='refresh' content='30'><style>{STYLE}</style></head><body>"
        "<h1>Kafka tiered storage</h1>"
        f"<p>{len(rows)} partition(s); {lag} segment(s) waiting for copy; {remote:,} bytes in the remote tier; "
        f"{at_risk} at local-retention risk; {with_gaps} with tiering gaps. "
        "JSON: <a href='api/partitions'>api/partitions</a></p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(_row_html(r) for r in rows)}</tbody></table>"
        "</body></html>"
    )


def render_error(message: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Tiering</title>"
        f"<style>{STYLE}</style></head><body><h1>Kafka tiered storage</h1>"
        f"<p class='bad'>Tier state unavailable: {html.escape(message)}</p></body></html>"
    )


def plugin_view_access() -> Any:
    """The dependency every route runs: Airflow's own check for access to plugin views."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return Depends(requires_access_view(AccessView.PLUGINS))


def create_app(config_path: str | None = None, status_timeout: float = DEFAULT_STATUS_TIMEOUT) -> FastAPI:
    """The page and its JSON; ``config_path=None`` resolves the config on each request."""
    app = FastAPI(
        title="Kafka tiering",
        description="Tier state of every partition",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    # Airflow's access check is each page route's own: /metrics also takes the scrapers' token.
    app.include_router(metrics_router(config_path, status_timeout))

    @app.get("/api/partitions", dependencies=[plugin_view_access()])
    def partitions(topic: str | None = Query(None, description="only this topic")) -> list[dict[str, Any]]:
        try:
            return read_status(config_path, topic, status_timeout)
        except StatusUnavailable as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from exc

    @app.get("/", response_class=HTMLResponse, dependencies=[plugin_view_access()])
    def page(topic: str | None = Query(None, description="only this topic")) -> HTMLResponse:
        try:
            return HTMLResponse(render_page(read_status(config_path, topic, status_timeout)))
        except StatusUnavailable as exc:
            return HTMLResponse(render_error(str(exc)), status_code=503)

    return app
