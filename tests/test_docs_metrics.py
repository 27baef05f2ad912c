"""The metrics table of docs/metrics.md lists exactly the metric set of ``tiering_core.metrics.names``, in
its order, with each metric's Prometheus sample, kind, StatsD/OpenTelemetry name, labels, the Kafka
metric it maps to and its meaning: the docs cannot drift from what is emitted and exported. Every
name follows one scheme: Prometheus' conventions (snake_case, a unit suffix in base units, counters
``_total``) and the same base name behind ``tiering.`` for Airflow's pipeline."""

from __future__ import annotations

import re
from pathlib import Path

from tiering_core.metrics import names
from tiering_core.metrics.names import MetricKind

PAGE = Path(__file__).resolve().parents[1] / "docs/metrics.md"
#: What a base name may end in: a unit in base units, a count of things, KIP-1257's percents, or
#: a 0/1 flag's subject.
SUFFIXES = ("_bytes", "_seconds", "_segments", "_offsets", "_entries", "_in_percent")
FLAGS = {"gaps", "local_retention_risk", "silent_broker", "dag_run_failed"}
#: Kafka's JMX groups a mapped metric is found under (KIP-405/930/963 meters and gauges, KIP-956's
#: throttle sensors, KIP-1257's percents).
KAFKA_GROUPS = (names.TOPIC_METRICS, names.REMOTE_LOG_MANAGER, names.RLM_SENSORS)


def metrics_table() -> list[list[str]]:
    """The cells of the page's metrics table (before its first section), header and rule left out."""
    section = PAGE.read_text().split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| Prometheus | Kind | StatsD / OpenTelemetry | Labels | Kafka name | Meaning |")
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_docs_table_lists_exactly_the_metric_set() -> None:
    rows = metrics_table()
    specs = names.METRICS + names.PLATFORM_METRICS
    assert [row[0].strip("`") for row in rows] == [spec.prometheus_samples[0] for spec in specs]
    for row, spec in zip(rows, specs, strict=True):
        prometheus, kind, statsd, labels, kafka, meaning = row
        assert prometheus == f"`{spec.prometheus_samples[0]}`"
        assert kind == spec.kind.value
        assert statsd == (f"`{spec.statsd_name}`" if spec in names.METRICS else "-"), spec.name
        assert tuple(label.strip() for label in labels.split(",")) == spec.labels
        assert kafka == ("(platform)" if spec.kafka_name is None else f"`{spec.kafka_name}`")
        assert meaning == spec.help


def test_every_name_follows_the_one_scheme() -> None:
    specs = names.METRICS + names.PLATFORM_METRICS
    assert len({spec.name for spec in specs}) == len(specs)
    for spec in specs:
        assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", spec.name), spec.name
        assert spec.name.endswith(SUFFIXES) or spec.name in FLAGS or spec.kind is MetricKind.COUNTER, spec.name
        assert not spec.name.endswith(("_total", "_count", "_sum", "_bucket", "_ms")), spec.name
        assert spec.prometheus_name == f"tiering_{spec.name}" and spec.statsd_name == f"tiering.{spec.name}"
        if spec.kind is MetricKind.COUNTER:
            assert spec.prometheus_samples == (f"tiering_{spec.name}_total",)
        if spec.kafka_name is not None:
            assert spec.kafka_name.startswith(KAFKA_GROUPS), spec.kafka_name
    # Kafka's millisecond sensors are exported in seconds.
    for spec in names.THROTTLE_METRICS:
        assert spec.name.endswith("_seconds") and "seconds" in spec.help
