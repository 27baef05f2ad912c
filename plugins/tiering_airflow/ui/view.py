"""The Tiering page's HTML, computed from the metadata store's view of every broker alone (an
``Overview`` for the page, a ``MetricsSnapshot`` of one topic for its partition table), so the API
server renders it without any log dir.

The page opens on its first screen (``health.py``: is tiering healthy?), then holds the alerts an
operator acts on (tiering gaps, local-retention risk, stale brokers, failed scrubs) and one summary
row per topic (partitions, remote size, copy lag, gaps, risk).
A topic's partitions and charts load when its row is opened (``fragments/partitions`` and
``api/series``), so a page over ten thousand partitions stays small. Every link is relative: the
page is served under ``/tiering/`` of an Airflow that may itself sit under a path prefix, and
links into Airflow's UI (DAG grids, task logs) open in Airflow's own frame when the page is shown
inside it (``static/tiering.js``).
"""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tiering_airflow.dag_ids import dag_ids_of
from tiering_airflow.ui.erasures import erasures_html, table_erasures_html
from tiering_airflow.ui.tables import titled_table
from tiering_core.humanize import fmt_age, fmt_bytes
from tiering_core.metadata.erasures import ErasureRecord, TableErasureRecord
from tiering_core.metadata.values import ReplayRecord, TaskAttempt
from tiering_core.monitoring.overview import Overview, TopicSummary, overview_of
from tiering_core.monitoring.snapshot import MetricsSnapshot, PartitionMetrics, SeriesPoint

#: The chart windows ``topic_series`` serves, as the page names them.
WINDOWS: tuple[str, ...] = ("24h", "7d")
#: Partition rows one request for a topic's table answers (the next ones on request).
PAGE_ROWS = 200
#: No partition exported (no ``export`` section, or no table yet).
EMPTY: Mapping[int, int] = MappingProxyType({})
#: No topic the config leaves untiered.
EMPTY_REASONS: Mapping[str, str] = MappingProxyType({})
#: Nothing more for the page's script.
EMPTY_DATA: Mapping[str, object] = MappingProxyType({})
#: Partitions an alert names before it says "and N more".
ALERT_NAMES = 8

#: (title, css class) of the topic summary columns after the topic's name.
SUMMARY_COLUMNS: tuple[str, ...] = (
    "Partitions",
    "Remote size",
    "Copy lag",
    "Lag segments",
    "Tiering gaps",
    "Local-retention risk",
    "Last copy",
)

#: The partition table's column titles: the links first, so they stay on screen however narrow the
#: window; the figures an operator acts on next (risk, lag, gaps), each cell wrapping as it must.
PARTITION_COLUMNS: tuple[str, ...] = (
    "Partition",
    "Links",
    "Risk",
    "Copy lag",
    "Tiering gaps",
    "Remote size",
    "Remote only",
    "Last copy",
    "Replicas",
    "Exported up to",
    "Deletion",
)


def summarize(snapshot: MetricsSnapshot) -> list[TopicSummary]:
    """One summary per topic, by topic name."""
    return overview_of(snapshot).topics


@dataclass(slots=True)
class Alert:
    """One line at the top of the page: ``kind`` is gap, risk, stale or scrub."""

    kind: str
    text: str
    topic: str | None = None


@dataclass(slots=True)
class _Named:
    """Partitions of one topic (or replicas of one broker) an alert names, and a figure summed."""

    names: list[str] = field(default_factory=list)
    count: int = 0
    total: float = 0

    def add(self, name: str, value: float = 0) -> None:
        self.count += 1
        self.total += value
        if len(self.names) < ALERT_NAMES:
            self.names.append(name)

    def listing(self) -> str:
        more = self.count - len(self.names)
        return ", ".join(self.names) + (f" and {more} more" if more > 0 else "")


def alerts(source: MetricsSnapshot | Overview) -> list[Alert]:
    """Tiering gaps and local-retention risk per topic, brokers that reported nothing fresh and
    stale replicas per broker, failed scrubs per topic: in that order, the worst first."""
    overview = source if isinstance(source, Overview) else overview_of(source)
    gaps: dict[str, _Named] = {}
    risks: dict[str, _Named] = {}
    scrubs: dict[str, _Named] = {}
    stale: dict[int, _Named] = {}
    silent = overview.silent_brokers
    for entry in overview.gaps:
        gaps.setdefault(entry.topic, _Named()).add(entry.name, entry.value)
    for entry in overview.risks:
        risks.setdefault(entry.topic, _Named()).add(entry.name)
    for entry in overview.stale:
        stale.setdefault(entry.value, _Named()).add(entry.name)
    for entry in overview.scrubs:
        scrubs.setdefault(entry.topic, _Named()).add(entry.name, entry.value)
    found = [
        Alert(
            "gap",
            f"Tiering gap: {n.count} partition(s) of {topic} lost {int(n.total):,} offset(s) the broker deleted "
            f"before they were copied ({n.listing()})",
            topic,
        )
        for topic, n in sorted(gaps.items())
    ]
    found += [
        Alert(
            "risk",
            f"Local-retention risk: {n.count} partition(s) of {topic} may lose data the broker deletes before "
            f"it is copied ({n.listing()})",
            topic,
        )
        for topic, n in sorted(risks.items())
    ]
    found += [
        Alert("stale", f"Stale broker: broker {b} reported nothing fresh; its replicas are not trusted")
        for b in sorted(silent)
    ]
    found += [
        Alert("stale", f"Stale broker: broker {b}'s observation of {n.count} partition(s) is stale ({n.listing()})")
        for b, n in sorted(stale.items())
    ]
    found += [
        Alert(
            "scrub",
            f"Failed scrub: {int(n.total)} failure(s) on {n.count} partition(s) of {topic} ({n.listing()})",
            topic,
        )
        for topic, n in sorted(scrubs.items())
    ]
    return found


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _attr(name: str, value: object) -> str:
    """`` name="value"`` (escaped), or nothing for an empty value."""
    return f' {name}="{_e(value)}"' if value else ""


def _size(n: int | None) -> str:
    return "-" if n is None else fmt_bytes(n)


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _ago(now_ms: int, at_ms: int | None) -> str:
    return "never" if at_ms is None else f"{fmt_age(max(0, now_ms - at_ms))} ago"


def dag_url(dag_id: str) -> str:
    """Airflow's page of a DAG (its grid), relative to the Tiering page at ``<prefix>/tiering/``."""
    return f"../dags/{urllib.parse.quote(dag_id, safe='')}"


def task_log_url(task: TaskAttempt) -> str:
    """Airflow 3's page of a task instance's try, whose first tab is its log (relative, as above)."""
    q = urllib.parse.quote
    url = f"{dag_url(task.dag_id)}/runs/{q(task.run_id, safe='')}/tasks/{q(task.task_id, safe='')}"
    if task.map_index >= 0:
        url += f"/mapped/{task.map_index}"
    return f"{url}?try_number={task.try_number}"


def _link(url: str, text: str) -> str:
    """A link to a page of Airflow's UI: inside Airflow's iframe (sandboxed, no top navigation) the
    page's script opens it in Airflow's own frame, elsewhere it is a plain link."""
    return f'<a class="airflow" href="{_e(url)}">{_e(text)}</a>'


def _cells(values: Iterable[tuple[str, str, str]]) -> str:
    """``<td>`` cells from (column title, text or HTML, css class); the title labels the cell when
    the table collapses to cards on a narrow screen."""
    return "".join(
        f"<td{_attr('data-label', title)}{_attr('class', cls)}>{content}</td>" for title, content, cls in values
    )


def _replicas(p: PartitionMetrics, now_ms: int) -> str:
    if not p.replicas:
        return "none observed"
    parts = []
    for r in sorted(p.replicas, key=lambda r: r.broker_id):
        mark = "*" if r.broker_id == p.best_broker else ("!" if r.stale else "")
        flag = ' class="bad"' if r.stale or r.at_risk else ""
        parts.append(f"<span{flag}>{r.broker_id}{mark} {_e(fmt_age(max(0, now_ms - r.observed_ms)))}</span>")
    return " ".join(parts)


def _risk(p: PartitionMetrics) -> tuple[str, str]:
    if not p.at_risk:
        return "ok", "ok"
    headroom = [r.headroom_seconds for r in p.replicas if r.at_risk and not r.stale and r.headroom_seconds is not None]
    if not headroom:
        return "AT RISK", "bad"
    left = min(headroom)
    return ("AT RISK: past due" if left <= 0 else f"AT RISK: {fmt_age(int(left * 1000))} left"), "bad"


def _remote_only(p: PartitionMetrics) -> str:
    """The tiered offsets below the best replica's log start: readable from the tier only."""
    if p.remote_only_offsets is None:
        return "-"
    start, end = p.remote_only_offsets
    return f"{start:,}..{end:,}"


def partition_row(
    p: PartitionMetrics, now_ms: int, named: Collection[str], exported: Mapping[int, int] | None = EMPTY
) -> str:
    """One partition's row; ``exported``: the offset the topic's export table holds up to per
    partition (None: the table could not be read)."""
    up_to = "unavailable" if exported is None else (f"{exported[p.partition]:,}" if p.partition in exported else "-")
    copy_dag, retention_dag = dag_ids_of(p.topic, named)
    risk, risk_class = _risk(p)
    gaps = f"{p.gap_count} ({p.gap_offsets:,} offsets lost)" if p.gap_count else "none"
    links = _link(dag_url(copy_dag), "copy") + " " + _link(dag_url(retention_dag), "retention")
    if p.last_task:
        links += " " + _link(task_log_url(p.last_task), f"{p.last_task.task_id} log")
    lag = _size(p.copy_lag_bytes) + (f" ({p.copy_lag_segments:,} seg)" if p.copy_lag_segments else "")
    remote = _size(p.remote_bytes) + (f" ({p.remote_segments:,} seg)" if p.remote_segments else "")
    deletion = p.delete_state or "-"
    if p.delete_lag_bytes:
        deletion += f"; {_size(p.delete_lag_bytes)} to delete"
    alert = p.gap_count or p.at_risk
    return (
        f"<tr{_attr('class', 'alert' if alert else '')}>"
        + _cells(
            (
                ("", _e(f"{p.topic}-{p.partition}"), ""),
                ("Links", links, "links"),
                ("Risk", _e(risk), risk_class),
                ("Copy lag", _e(lag), "bad" if p.at_risk else ""),
                ("Tiering gaps", _e(gaps), "bad" if p.gap_count else "ok"),
                ("Remote size", _e(remote), ""),
                ("Remote only", _e(_remote_only(p)), ""),
                ("Last copy", _e(_ago(now_ms, p.last_copy_ms)), ""),
                ("Replicas", _replicas(p, now_ms), ""),
                ("Exported up to", _e(up_to), ""),
                ("Deletion", _e(deletion), ""),
            )
        )
        + "</tr>"
    )


def render_partitions(
    snapshot: MetricsSnapshot,
    named: Collection[str],
    offset: int = 0,
    limit: int = PAGE_ROWS,
    exported: Mapping[int, int] | None = EMPTY,
) -> str:
    """The partition table of the snapshot's partitions (one topic's, as the page asks for them),
    ``limit`` rows from ``offset`` by partition number, and a button for the next rows if any;
    ``exported`` as ``partition_row`` takes it."""
    head = "".join(f"<th>{_e(title)}</th>" for title in PARTITION_COLUMNS)
    ordered = sorted(snapshot.partitions, key=lambda p: p.partition)
    rows = "".join(partition_row(p, snapshot.db_now_ms, named, exported) for p in ordered[offset : offset + limit])
    if not rows:
        rows = f'<tr><td colspan="{len(PARTITION_COLUMNS)}">no partition in the metadata store</td></tr>'
    shown = min(len(ordered), offset + limit)
    more = ""
    if shown < len(ordered):
        more = (
            f'<p class="more">{shown:,} of {len(ordered):,} partitions shown. '
            f'<button type="button" data-offset="{shown}">Show {min(limit, len(ordered) - shown):,} more</button></p>'
        )
    return f'<table class="partitions"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}'


def not_tiered_html(not_tiered: Mapping[str, str]) -> str:
    """The topics the config says are not tiered (a compacted one, ``remote.storage.enable``
    false, ...), grouped by why, each group naming a few of them."""
    by_reason: dict[str, _Named] = {}
    for topic, reason in sorted(not_tiered.items()):
        by_reason.setdefault(reason, _Named()).add(topic)
    if not by_reason:
        return ""
    items = "".join(
        f"<li>{_e(f'{n.count} topic(s) not tiered ({reason}): {n.listing()}')}</li>"
        for reason, n in sorted(by_reason.items())
    )
    return f"<ul class='not-tiered'>{items}</ul>"


def _summary_row(s: TopicSummary, now_ms: int, not_tiered: str | None = None, links: str = "") -> str:
    values = (
        _count(s.partitions),
        _size(s.remote_bytes),
        _size(s.copy_lag_bytes),
        _count(s.copy_lag_segments),
        f"{s.gap_partitions} ({s.gap_offsets:,} offsets lost)" if s.gap_partitions else "none",
        f"{s.at_risk} partition(s)" if s.at_risk else "none",
        _ago(now_ms, s.last_copy_ms),
    )
    bad = (False, False, bool(s.at_risk), False, bool(s.gap_partitions), bool(s.at_risk), False)
    cells = "".join(
        f'<span class="cell{" bad" if flag else ""}" data-label="{_e(title)}">{_e(value)}</span>'
        for title, value, flag in zip(SUMMARY_COLUMNS, values, bad, strict=True)
    )
    alert = " alert" if s.gap_partitions or s.at_risk else ""
    note = f' <span class="note">not tiered: {_e(not_tiered)}</span>' if not_tiered else ""
    head = f'<p class="topic-links">{links}</p>' if links else ""
    return (
        f'<details class="topic{alert}" data-topic="{_e(s.topic)}">'
        f'<summary class="row"><span class="cell name">{_e(s.topic)}{note}</span>{cells}</summary>'
        f'<div class="body">{head}<div class="charts">'
        + "".join(
            f'<figure class="chart" data-window="{w}"><figcaption>Remote size and copy lag, last {w}</figcaption>'
            '<div class="plot"></div></figure>'
            for w in WINDOWS
        )
        + '</div><div class="scroll partitions-wrap">Loading partitions…</div></div></details>'
    )


def _show(topic: str) -> str:
    """A link that filters the page to ``topic`` (which then opens: the script's rule)."""
    return f' <a href="?topic={_e(urllib.parse.quote(topic, safe=""))}">Show {_e(topic)}</a>'


#: The replays the page lists, newest first.
LAST_REPLAYS = 10
REPLAY_COLUMNS = ("Source", "Target", "Offsets", "Records", "Size", "Outcome", "Not replayed", "Finished")


def replays_html(replays: Iterable[ReplayRecord], now_ms: int) -> str:
    """The last replays into Kafka topics: each source partition's range, what it committed, its
    outcome and the offsets it could not replay."""
    rows = []
    for r in replays:
        offsets = (
            "none in range"
            if r.first_offset is None or r.last_offset is None
            else (f"{r.first_offset:,}-{r.last_offset:,}")
        )
        if r.resumed_after is not None:
            offsets += f" (resumed after {r.resumed_after:,})"
        outcome = r.outcome + (f": {r.detail}" if r.detail else "")
        missing = "; ".join(f"{start:,}-{end:,} ({why})" for start, end, why in r.gaps) or "none"
        rows.append(
            (
                (f"{r.topic}-{r.partition}", False),
                (r.target_topic, False),
                (offsets, False),
                (f"{r.records:,}", False),
                (_size(r.bytes), False),
                (outcome, r.outcome not in ("replayed", "up to date")),
                (missing, bool(r.gaps)),
                (_ago(now_ms, r.finished_ms), False),
            )
        )
    return titled_table("replays", "Last replays", REPLAY_COLUMNS, rows)


def render_page(
    source: MetricsSnapshot | Overview,
    not_tiered: Mapping[str, str] = EMPTY_REASONS,
    replays: Iterable[ReplayRecord] = (),
    erasures: Iterable[ErasureRecord] = (),
    *,
    table_erasures: Iterable[TableErasureRecord] = (),
    first: str = "",
    nav: str = "",
    data: Mapping[str, object] = EMPTY_DATA,
    topic_links: Mapping[str, str] = EMPTY_REASONS,
) -> str:
    """The whole page: the first screen (``first``: ``health.render_health``'s), alerts, the topics
    not tiered and why, totals, one summary row per topic (see the module docstring), from the
    store's overview or a snapshot's; ``not_tiered``: topic -> why the config says it is not
    tiered; then the last replays and the last erasures (of partitions, then of export tables), if
    any. ``nav``: links beside the title (brokers, Grafana); ``data``: more for the page's script
    (the copy history); ``topic_links``: HTML of links shown in an opened topic (Grafana)."""
    overview = source if isinstance(source, Overview) else overview_of(source)
    summaries = overview.topics
    found = alerts(overview)
    if found:
        alert_html = '<ul class="alerts">' + "".join(
            f'<li class="alert-{a.kind}"{_attr("data-topic", a.topic)}>{_e(a.text)}'
            + (
                f' <a href="?topic={_e(urllib.parse.quote(a.topic, safe=""))}">Show {_e(a.topic)}</a>'
                if a.topic
                else ""
            )
            + "</li>"
            for a in found
        )
        alert_html += "</ul>"
    else:
        alert_html = (
            '<p class="no-alerts ok">No alerts: no tiering gap, no local-retention risk, every broker fresh, '
            "no failed scrub.</p>"
        )
    remote = sum(s.remote_bytes for s in summaries)
    lag = sum(s.copy_lag_bytes or 0 for s in summaries)
    partitions = sum(s.partitions for s in summaries)
    head = '<span class="cell name">Topic</span>'
    head += "".join(f'<span class="cell">{_e(t)}</span>' for t in SUMMARY_COLUMNS)
    topics = "".join(
        _summary_row(s, overview.db_now_ms, not_tiered.get(s.topic), topic_links.get(s.topic, "")) for s in summaries
    )
    topics = topics or "<p>No partition in the metadata store yet.</p>"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'><title>Tiering</title>"
        "<link rel='stylesheet' href='static/uPlot.min.css'><link rel='stylesheet' href='static/tiering.css'>"
        "</head><body><header><h1>Kafka tiered storage</h1>"
        "<form class='filter' role='search' onsubmit='return false'><label for='topic-filter'>Topic</label> "
        "<input id='topic-filter' name='topic' type='search' placeholder='filter topics' autocomplete='off'></form>"
        f"{nav}</header>{first}"
        f"<section class='alerts-box' aria-label='Alerts'>{alert_html}{not_tiered_html(not_tiered)}</section>"
        f"<p class='totals'>{len(summaries)} topic(s), {partitions:,} partition(s); {_e(fmt_bytes(remote))} in the "
        f"remote tier; {_e(fmt_bytes(lag))} waiting for copy. JSON: <a href='api/partitions'>api/partitions</a></p>"
        f"<div class='topics'><div class='row head' aria-hidden='true'>{head}</div>{topics}</div>"
        f"{replays_html(replays, overview.db_now_ms)}{erasures_html(erasures, overview.db_now_ms)}"
        f"{table_erasures_html(table_erasures, overview.db_now_ms)}"
        f"<script id='tiering-data' type='application/json'>{_script_json({**data, 'windows': list(WINDOWS)})}</script>"
        "<script src='static/uPlot.iife.min.js'></script><script src='static/tiering.js'></script>"
        "</body></html>"
    )


def _script_json(value: object) -> str:
    """JSON safe inside a ``<script>`` element."""
    return json.dumps(value).replace("<", "\\u003c")


def render_error(message: str) -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'><title>Tiering</title>"
        "<link rel='stylesheet' href='static/tiering.css'></head><body><h1>Kafka tiered storage</h1>"
        f"<p class='bad'>Tier state unavailable: {html.escape(message)}</p></body></html>"
    )


def series_dict(points: list[SeriesPoint]) -> dict[str, list[int]]:
    """Chart points as uPlot takes them: one array per series, times in seconds."""
    return {
        "at": [p.at_ms // 1000 for p in points],
        "remote_bytes": [p.remote_bytes for p in points],
        "copy_lag_bytes": [p.copy_lag_bytes for p in points],
    }
