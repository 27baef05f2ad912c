"""The metrics table of docs/metrics.md lists exactly the metric set of ``tiering_core.metrics.names``, in
its order, with each metric's kind, StatsD and Prometheus names, labels and meaning: the docs
cannot drift from what is emitted and exported."""

from __future__ import annotations

import re
from pathlib import Path

from tiering_core.metrics import names

PAGE = Path(__file__).resolve().parents[1] / "docs/metrics.md"
#: The metrics Kafka itself has (KIP-405, named by KIP-930; the quotas' throttle time by KIP-956);
#: the others are marked "(platform)".
KAFKAS = {
    "RemoteCopyBytes",
    "RemoteCopyRequests",
    "RemoteCopyErrors",
    "RemoteDeleteRequests",
    "RemoteDeleteErrors",
    "RemoteFetchBytes",
    "RemoteFetchRequests",
    "RemoteFetchErrors",
    "RemoteCopyLagBytes",
    "RemoteCopyLagSegments",
    "RemoteDeleteLagBytes",
    "RemoteDeleteLagSegments",
    "RemoteLogSizeBytes",
    "RemoteLogMetadataCount",
    "remote-copy-throttle-time-avg",
    "remote-copy-throttle-time-max",
    "remote-fetch-throttle-time-avg",
    "remote-fetch-throttle-time-max",
    "RetentionSizeInPercent",  # KIP-1257
    "LocalRetentionSizeInPercent",
}


def metrics_table() -> list[list[str]]:
    """The cells of the page's metrics table, header and rule left out."""
    lines = [line for line in PAGE.read_text().splitlines() if line.startswith("|")]
    assert lines[0].startswith("| Kafka name | Kind | StatsD | Prometheus | Tags / labels | Meaning |")
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_docs_table_lists_exactly_the_metric_set() -> None:
    rows = metrics_table()
    specs = names.METRICS + names.PLATFORM_METRICS
    assert [re.sub(r"`|\s*\(platform\)", "", row[0]) for row in rows] == [spec.name for spec in specs]
    for row, spec in zip(rows, specs, strict=True):
        name, kind, statsd, prometheus, labels, meaning = row
        assert name == f"`{spec.name}`" + ("" if spec.name in KAFKAS else " (platform)")
        assert kind == spec.kind.value
        assert statsd == (f"`{spec.statsd_name}`" if spec in names.METRICS else "-"), spec.name
        assert prometheus == f"`{spec.prometheus_samples[0]}`"
        assert tuple(label.strip() for label in labels.split(",")) == spec.labels
        assert meaning == spec.help
