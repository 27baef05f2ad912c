"""The README's metrics table lists exactly the metric set of ``tiering_core.metrics.names``, in
its order, with each metric's kind, StatsD and Prometheus names, labels and meaning: the docs
cannot drift from what is emitted and exported."""

from __future__ import annotations

import re
from pathlib import Path

from tiering_core.metrics import names

README = Path(__file__).resolve().parents[1] / "README.md"
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
    """The cells of the table in the README's "Metrics" section, header and rule left out."""
    section = README.read_text().split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| Kafka name | Kind | StatsD | Prometheus | Tags / labels | Meaning |")
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_readme_table_lists_exactly_the_metric_set() -> None:
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
