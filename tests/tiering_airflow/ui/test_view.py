"""The Tiering page's HTML from a metrics snapshot: one summary row per topic, alerts on top, the
partition table with human sizes and ages and links into Airflow's UI, all relative."""

from __future__ import annotations

import re

from tiering_airflow.ui.view import (
    PARTITION_COLUMNS,
    SUMMARY_COLUMNS,
    alerts,
    render_page,
    render_partitions,
    series_dict,
    summarize,
    task_log_url,
)
from tiering_core.metadata.values import NO_BROKER, PartitionCounters, TaskAttempt
from tiering_core.monitoring.snapshot import MetricsSnapshot, PartitionMetrics, ReplicaMetrics, SeriesPoint

NOW = 1_800_000_000_000
MIB = 1024 * 1024


def replica(
    broker_id: int, *, stale: bool = False, at_risk: bool = False, headroom: float | None = None
) -> ReplicaMetrics:
    return ReplicaMetrics(
        broker_id=broker_id,
        observed_ms=NOW - 30_000,
        stale=stale,
        at_risk=at_risk,
        headroom_seconds=headroom,
        high_watermark=100,
        last_stable_offset=100,
        log_end_offset=100,
        local_log_start_offset=0,
        leader_epoch=3,
    )


def snapshot() -> MetricsSnapshot:
    copy_task = TaskAttempt("tiering_copy__orders", "scheduled__2026-01-01T00:10:00+00:00", "copy", 1, 2)
    return MetricsSnapshot(
        db_now_ms=NOW,
        partitions=[
            PartitionMetrics(
                "orders",
                0,
                "t-orders",
                remote_bytes=3 * MIB,
                remote_segments=3,
                copy_lag_bytes=0,
                copy_lag_segments=0,
                last_copy_ms=NOW - 3 * 3_600_000,
                best_broker=1,
                remote_log_start_offset=0,
                remote_only_offsets=[0, 1499],
                replicas=[replica(1), replica(2)],
            ),
            PartitionMetrics(
                "orders",
                1,
                "t-orders",
                remote_bytes=MIB,
                remote_segments=1,
                copy_lag_bytes=2048,
                copy_lag_segments=2,
                gap_count=1,
                gap_offsets=5,
                last_copy_ms=NOW - 90_000,
                best_broker=1,
                last_task=copy_task,
                replicas=[replica(1, at_risk=True, headroom=600.0), replica(3, stale=True)],
                counters_by_broker={
                    1: PartitionCounters(scrub_failures=1),
                    NO_BROKER: PartitionCounters(scrub_failures=1),
                },
            ),
            PartitionMetrics("clicks<b>", 0, "t-clicks", remote_bytes=512, remote_segments=1),
        ],
        silent_brokers=[4],
    )


def test_one_summary_row_per_topic_adds_up_its_partitions() -> None:
    orders, clicks = summarize(snapshot())[1], summarize(snapshot())[0]
    assert (clicks.topic, orders.topic) == ("clicks<b>", "orders")
    assert (orders.partitions, orders.remote_bytes, orders.copy_lag_bytes, orders.copy_lag_segments) == (
        2,
        4 * MIB,
        2048,
        2,
    )
    assert (orders.gap_partitions, orders.gap_offsets, orders.at_risk, orders.last_copy_ms) == (1, 5, 1, NOW - 90_000)
    assert clicks.copy_lag_bytes is None  # no fresh replica observed it: unknown, not zero

    page = render_page(snapshot())
    rows = re.findall(r'<details class="topic[^"]*" data-topic="([^"]*)"><summary class="row">', page)
    assert rows == ["clicks&lt;b&gt;", "orders"]
    assert "clicks<b>" not in page  # escaped everywhere
    for title in SUMMARY_COLUMNS:
        assert f'data-label="{title}"' in page
    orders_row = page[page.index('data-topic="orders"') :]
    assert '<span class="cell" data-label="Remote size">4.0 MiB</span>' in orders_row
    assert '<span class="cell bad" data-label="Copy lag">2.0 KiB</span>' in orders_row
    assert '<span class="cell" data-label="Last copy">90s ago</span>' in orders_row
    assert '<span class="cell bad" data-label="Tiering gaps">1 (5 offsets lost)</span>' in orders_row
    assert "3 topic" not in page and "2 topic(s), 3 partition(s)" in page


def test_alerts_name_gaps_risk_stale_brokers_and_failed_scrubs() -> None:
    found = [(a.kind, a.text) for a in alerts(snapshot())]
    assert [kind for kind, _ in found] == ["gap", "risk", "stale", "stale", "scrub"]
    assert "orders-1" in found[0][1] and "5 offset(s)" in found[0][1]
    assert "Local-retention risk" in found[1][1] and "orders-1" in found[1][1]
    assert "broker 4 reported nothing fresh" in found[2][1]
    assert "broker 3's observation of 1 partition(s) is stale (orders-1)" in found[3][1]
    assert "Failed scrub: 2 failure(s) on 1 partition(s) of orders" in found[4][1]
    page = render_page(snapshot())
    assert page.index('class="alerts"') < page.index("class='topics'")  # on top
    assert '<a href="?topic=orders">Show orders</a>' in page  # the topic, filtered and opened
    quiet = MetricsSnapshot(NOW, [PartitionMetrics("orders", 0, "t")])
    assert alerts(quiet) == [] and "No alerts" in render_page(quiet)


def test_many_partitions_name_a_few_and_count_the_rest() -> None:
    many = MetricsSnapshot(NOW, [PartitionMetrics("orders", i, "t", gap_count=1, gap_offsets=1) for i in range(100)])
    (gap,) = alerts(many)
    assert "orders-7" in gap.text and "orders-8" not in gap.text and "and 92 more" in gap.text


def test_partition_table_links_dag_grids_and_the_last_tasks_log() -> None:
    table = render_partitions(snapshot(), named={"orders"})
    for title in PARTITION_COLUMNS:
        assert f"<th>{title}</th>" in table
    assert table.count("<tr") == 1 + 3
    assert 'class="airflow" href="../dags/tiering_copy__orders">copy</a>' in table
    assert 'class="airflow" href="../dags/tiering_retention__orders">retention</a>' in table
    assert 'class="airflow" href="../dags/tiering_copy_default_topics"' in table  # clicks<b> is not named in the config
    run = "scheduled__2026-01-01T00%3A10%3A00%2B00%3A00"
    url = f"../dags/tiering_copy__orders/runs/{run}/tasks/copy/mapped/1?try_number=2"
    assert task_log_url(snapshot().partitions[1].last_task) == url  # type: ignore[arg-type]
    assert f'class="airflow" href="{url}">copy log</a>' in table
    assert '<td data-label="Risk" class="bad">AT RISK: 10m left</td>' in table
    assert '<td data-label="Tiering gaps" class="bad">1 (5 offsets lost)</td>' in table
    assert '<td data-label="Last copy">3h ago</td>' in table
    assert '<td data-label="Remote size">3.0 MiB (3 seg)</td>' in table
    assert '<td data-label="Remote only">0..1,499</td>' in table  # below the broker's log start
    assert table.count('<td data-label="Remote only">-</td>') == 2
    assert table.count('<tr class="alert">') == 1
    # The links come right after the partition's name (on screen in a narrow window); lags name
    # their segments; a delete lag shows beside the delete state.
    assert '<td>orders-1</td><td data-label="Links" class="links"><a class="airflow" href="../dags/' in table
    assert '<td data-label="Copy lag" class="bad">2.0 KiB (2 seg)</td>' in table
    deleting = PartitionMetrics("orders", 9, "t", delete_state="DELETE_PARTITION_STARTED", delete_lag_bytes=4096)
    row = render_partitions(MetricsSnapshot(NOW, [deleting]), named={"orders"})
    assert '<td data-label="Deletion">DELETE_PARTITION_STARTED; 4.0 KiB to delete</td>' in row


def test_partition_table_answers_a_page_of_rows_at_a_time() -> None:
    many = MetricsSnapshot(NOW, [PartitionMetrics("orders", i, "t") for i in reversed(range(450))])
    first = render_partitions(many, {"orders"}, 0, 200)
    assert first.count("<tr>") == 1 + 200 and ">orders-0<" in first and ">orders-199<" in first
    assert '200 of 450 partitions shown. <button type="button" data-offset="200">Show 200 more</button>' in first
    last = render_partitions(many, {"orders"}, 400, 200)
    assert last.count("<tr>") == 1 + 50 and ">orders-449<" in last and "<button" not in last


def test_every_url_is_relative_and_nothing_loads_from_elsewhere() -> None:
    page = render_page(snapshot()) + render_partitions(snapshot(), {"orders"})
    urls = re.findall(r"""(?:href|src)=["']([^"']*)["']""", page)
    assert urls and all(not u.startswith(("/", "http:", "https:")) for u in urls), urls
    assert "static/uPlot.iife.min.js" in urls and "static/uPlot.min.css" in urls


def test_series_as_uplot_takes_it() -> None:
    points = [SeriesPoint(NOW - 300_000, 10, 2), SeriesPoint(NOW, 20, 0)]
    assert series_dict(points) == {
        "at": [NOW // 1000 - 300, NOW // 1000],
        "remote_bytes": [10, 20],
        "copy_lag_bytes": [2, 0],
    }


def test_a_page_over_ten_thousand_partitions_stays_small() -> None:
    """The page holds a row per topic and the alerts, never a row per partition: those load when
    a topic is opened, a page of rows at a time."""
    partitions = [
        PartitionMetrics(
            f"topic-{t}",
            p,
            f"t{t}",
            remote_bytes=MIB,
            remote_segments=1,
            gap_count=int(p == 7),
            gap_offsets=int(p == 7),
            replicas=[replica(b) for b in (1, 2, 3)],
        )
        for t in range(10)
        for p in range(1000)
    ]
    page = render_page(MetricsSnapshot(NOW, partitions))
    assert page.count('<summary class="row">') == 10 and "<td>" not in page
    assert "10 topic(s), 10,000 partition(s)" in page and len(page) < 30_000
    table = render_partitions(MetricsSnapshot(NOW, partitions[:1000]), {"topic-0"})
    assert table.count("<tr") == 1 + 200 and "200 of 1,000 partitions shown" in table
