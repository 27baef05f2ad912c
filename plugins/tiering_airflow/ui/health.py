"""The Tiering page's first screen: is tiering healthy? A verdict, then the figures it rests on,
each a tile: failing runs, partitions at local-retention risk, tiering gaps, silent brokers, the
oldest segment not yet copied, the copy throughput of the last hour; then the failing runs with
their error and task log, the partitions at risk with their headroom, and the copies of the last
24 hours as a chart (recorded history, ``monitoring.health``).

A broker filter (``?broker=N``) narrows the risks and the partition tables to that broker's
replicas, a topic (``?topic=T``, naming one exactly) the whole first screen to that topic; Grafana
is linked when the config names it (``metrics.grafana_url``). The error texts
are ``failures.shown_error``'s, escaped here like every other text.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Sequence

from tiering_airflow.ui.failures import FailedTask
from tiering_airflow.ui.view import dag_url, task_log_url
from tiering_core.humanize import fmt_age, fmt_bytes, fmt_rate
from tiering_core.monitoring.health import HISTORY_BUCKET_MS, Health, ReplicaRisk
from tiering_core.monitoring.overview import Overview


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _airflow(url: str, text: str) -> str:
    """A link into Airflow's UI (opened in Airflow's own frame by the page's script)."""
    return f'<a class="airflow" href="{_e(url)}">{_e(text)}</a>'


def _query(**params: object) -> str:
    return "?" + urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})


def grafana_link(grafana_url: str | None, topic: str | None = None) -> str:
    """A link to Grafana (a new tab: it is not Airflow), with the topic as the dashboards'
    ``var-topic`` when there is one; nothing without a configured Grafana."""
    if not grafana_url:
        return ""
    url = grafana_url + (_query(**{"var-topic": topic}) if topic else "")
    return f'<a class="grafana" href="{_e(url)}" target="_blank" rel="noopener noreferrer">Grafana</a>'


def broker_filter(brokers: Sequence[int], broker: int | None) -> str:
    """Links to every broker's view and back to all brokers; the current one is marked."""
    if not brokers:
        return ""
    items = [("all brokers", None)] + [(f"broker {b}", b) for b in brokers]
    links = " ".join(
        f'<a href="{_e(_query(broker=b))}"{" aria-current=page" if b == broker else ""}>{_e(text)}</a>'
        for text, b in items
    )
    return f"<nav class='brokers' aria-label='Brokers'>{links}</nav>"


def _headroom(r: ReplicaRisk) -> str:
    if r.headroom_seconds is None:
        return "headroom unknown"
    if r.headroom_seconds <= 0:
        return "past due"
    return f"{fmt_age(int(r.headroom_seconds * 1000))} left"


def _tile(title: str, value: str, bad: bool, detail: str = "") -> str:
    note = f"<span class='detail'>{_e(detail)}</span>" if detail else ""
    return (
        f"<div class='tile{' bad' if bad else ''}' data-label='{_e(title)}'>"
        f"<span class='title'>{_e(title)}</span><span class='value'>{_e(value)}</span>{note}</div>"
    )


def failures_html(failures: Sequence[FailedTask] | None) -> str:
    """The failing runs, newest first: the task log first (it holds the whole story), the DAG's
    grid, the lane, when it ended, and the error text."""
    if failures is None:
        return "<p class='bad'>Failing runs unavailable: Airflow's database could not be read.</p>"
    if not failures:
        return "<p class='ok'>No failing run: every tiering DAG's latest run succeeded or is running.</p>"
    items = []
    for f in failures:
        a = f.attempt
        label = f.label or (f"map index {a.map_index}" if a.map_index >= 0 else "")
        where = f"{a.task_id}" + (f" [{label}]" if label else "") + f", try {a.try_number}"
        items.append(
            f"<li>{_airflow(task_log_url(a), 'log')} {_airflow(dag_url(a.dag_id), a.dag_id)} "
            f"<span class='where'>{_e(where)}</span>: <span class='error'>{_e(f.error)}</span></li>"
        )
    return f"<ul class='failures'>{''.join(items)}</ul>"


def risks_html(health: Health) -> str:
    """The replicas at local-retention risk, the least headroom first, each filtering the page
    to its topic."""
    if not health.risk_count:
        return "<p class='ok'>No partition at local-retention risk.</p>"
    items = "".join(
        f"<li><a href='{_e(_query(topic=r.topic))}'>{_e(r.name)}</a> on broker {r.broker_id}: "
        f"<span class='bad'>{_e(_headroom(r))}</span>, {_e(fmt_bytes(r.copy_lag_bytes or 0))} waiting for copy</li>"
        for r in health.risks
    )
    more = health.risk_count - len(health.risks)
    tail = f"<li>and {more} more</li>" if more > 0 else ""
    return f"<ul class='risks'>{items}{tail}</ul>"


def render_health(
    health: Health,
    overview: Overview,
    failures: Sequence[FailedTask] | None,
    *,
    broker: int | None = None,
    topic: str | None = None,
) -> str:
    """The first screen (module docstring), of one broker's replicas or one topic's if asked
    (``health`` and ``failures`` are already theirs)."""
    failing = len(failures or ())
    gaps = len({e.name for e in overview.gaps if topic is None or e.topic == topic})
    silent = overview.silent_brokers
    problems = failing + health.risk_count + gaps + len(silent) + (failures is None)
    verdict = "Healthy" if not problems else f"Not healthy: {problems} problem(s)"
    scopes = ([] if topic is None else [f"topic {topic}"]) + ([] if broker is None else [f"broker {broker}"])
    scope = f" ({', '.join(scopes)})" if scopes else ""
    oldest = health.oldest_uncopied
    tiles = "".join(
        (
            _tile("Failing runs", "unknown" if failures is None else str(failing), failures is None or failing > 0),
            _tile("At risk", f"{health.risk_count} replica(s)", health.risk_count > 0, "local retention headroom"),
            _tile("Tiering gaps", f"{gaps} partition(s)", gaps > 0),
            _tile("Silent brokers", ", ".join(map(str, silent)) or "none", bool(silent)),
            _tile(
                "Oldest uncopied",
                "none" if oldest is None else fmt_age(oldest.age_ms),
                False,
                "" if oldest is None else f"{oldest.topic}-{oldest.partition} on broker {oldest.broker_id}",
            ),
            _tile(
                "Throughput",
                fmt_rate(health.bytes_per_second),
                False,
                f"{fmt_bytes(health.copied_bytes)} copied in the last {fmt_age(health.window_ms)}",
            ),
        )
    )
    return (
        "<section class='health' aria-label='Health'>"
        f"<h2 class='verdict {'ok' if not problems else 'bad'}'>{_e(verdict + scope)}</h2>"
        f"<div class='tiles'>{tiles}</div>"
        "<div class='health-lists'>"
        f"<section aria-label='Failing runs'><h3>Failing runs</h3>{failures_html(failures)}</section>"
        f"<section aria-label='Partitions at risk'><h3>Partitions at risk</h3>{risks_html(health)}</section>"
        "</div>"
        f"<figure class='chart copy-history'><figcaption>Bytes copied per {fmt_age(HISTORY_BUCKET_MS)}, last 24h"
        "</figcaption><div class='plot'></div></figure>"
        "</section>"
    )


def copy_history_dict(health: Health) -> dict[str, list[int]]:
    """The copy history as uPlot takes it: times in seconds, bytes per bucket."""
    return {"at": [at // 1000 for at, _ in health.copy_history], "bytes": [b for _, b in health.copy_history]}
