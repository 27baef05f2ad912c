"""docker/'s Prometheus scrapes /tiering/metrics with the token the API server checks, and every
metric the Grafana dashboard queries is one the exposition exports, under exactly its name, in
every config (also with unlimited retention and no quota)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.engine_support import TieringEnv
from tests.monitoring.test_exposition import sample_snapshot
from tests.test_docker_files import dockerignored, mounts
from tiering_core.config import load_config, parse_config
from tiering_core.context import TieringContext
from tiering_core.metrics import names
from tiering_core.monitoring.collect import collect_metrics
from tiering_core.monitoring.exposition import render
from tiering_core.runs.copy import run_copy

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "kafka-tiering.json"
LABELS = {"topic", "partition", "broker"}
#: The PromQL functions and aggregations the dashboard may call (and Grafana's label_values).
FUNCTIONS = {"sum", "min", "max", "avg", "count", "rate", "irate", "increase", "delta", "topk", "label_values"}


#: PromQL's keywords: set operators and modifiers, never metric names.
KEYWORDS = {"and", "or", "unless", "bool", "on", "ignoring", "group_left", "group_right"}


def promql_names(expr: str, functions: set[str] = FUNCTIONS) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression uses; AssertionError on a function not in
    ``functions``."""
    expr = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana variables
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\boffset\s+-?\d+[smhdwy]\w*", "", expr)  # offset modifiers
    labels: set[str] = set()
    for block in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", block))
    expr = re.sub(r"\{[^}]*\}", "", expr)
    for grouping in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels |= {label.strip() for label in grouping.split(",") if label.strip()}
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    metrics: set[str] = set()
    for token in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if token.group() in KEYWORDS or re.fullmatch(r"\d", expr[token.start() - 1 : token.start()] or "x"):
            continue  # a keyword, or a number's exponent
        if expr[token.end() :].lstrip().startswith("("):
            assert token.group() in functions, f"unexpected function {token.group()} in {expr}"
        elif token.group() in LABELS and "label_values" in expr:
            labels.add(token.group())  # label_values(metric, label)
        else:
            metrics.add(token.group())
    return metrics, labels


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]
        queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def exported_samples() -> set[str]:
    """The sample names of a snapshot's exposition, as Prometheus' parser reads them."""
    text = render(sample_snapshot())
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_extraction_finds_metrics_labels_and_functions() -> None:
    metrics, labels = promql_names(
        'sum by (topic) (rate(tiering_remote_copy_bytes_total{topic=~"$topic",broker!="a{b}"}[$__rate_interval])) '
        "+ max(tiering_gaps)"
    )
    assert metrics == {"tiering_remote_copy_bytes_total", "tiering_gaps"} and labels == {"topic", "broker"}
    assert promql_names("label_values(tiering_remote_log_size_bytes, topic)") == (
        {"tiering_remote_log_size_bytes"},
        {"topic"},
    )


def test_every_metric_a_panel_uses_is_exported_under_its_name() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_samples()
    assert exported == {sample for spec in names.METRICS + names.PLATFORM_METRICS for sample in spec.prometheus_samples}
    used: set[str] = set()
    for query in dashboard_queries(dashboard):
        metrics, labels = promql_names(query)
        assert metrics and metrics <= exported, (query, metrics - exported)
        assert labels <= LABELS, (query, labels - LABELS)
        used |= metrics
    # What an operator watches: lag, bytes copied and deleted, errors, gaps, risk, remote size, and
    # how full each topic's partitions are against their retention limits (KIP-1257).
    for spec in (
        names.REMOTE_COPY_LAG_BYTES,
        names.REMOTE_COPY_LAG_SEGMENTS,
        names.REMOTE_COPY_BYTES,
        names.REMOTE_DELETE_REQUESTS,
        names.REMOTE_DELETE_LAG_BYTES,
        names.REMOTE_COPY_ERRORS,
        names.REMOTE_DELETE_ERRORS,
        names.REMOTE_FETCH_ERRORS,
        names.TIERING_GAPS,
        names.LOCAL_RETENTION_RISK,
        names.LOCAL_RETENTION_HEADROOM_SECONDS,
        names.REMOTE_LOG_SIZE_BYTES,
        names.RETENTION_SIZE_IN_PERCENT,
        names.LOCAL_RETENTION_SIZE_IN_PERCENT,
    ):
        assert spec.prometheus_samples[0] in used, spec.name


def test_the_retention_percent_panels_show_each_topic_s_fullest_partition_in_percent() -> None:
    """KIP-1257's gauges are per partition: a topic's panel line is its fullest partition (a sum of
    percents means nothing), drawn in percent with the limit (100) marked."""
    dashboard = json.loads(DASHBOARD.read_text())
    for spec in (names.RETENTION_SIZE_IN_PERCENT, names.LOCAL_RETENTION_SIZE_IN_PERCENT):
        (panel,) = [
            p for p in dashboard["panels"] if any(spec.prometheus_name in t["expr"] for t in p.get("targets", []))
        ]
        (target,) = panel["targets"]
        assert target["expr"] == f'max by (topic) ({spec.prometheus_name}{{topic=~"$topic"}})'
        assert spec.kafka_name is not None
        kafkas = spec.kafka_name.rsplit("name=", 1)[1]
        assert target["legendFormat"] == "{{topic}}" and kafkas in panel["description"]
        defaults = panel["fieldConfig"]["defaults"]
        assert defaults["unit"] == "percent"
        assert [step["value"] for step in defaults["thresholds"]["steps"]][-1] == 100


def test_panels_use_the_provisioned_data_source_and_unique_ids() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (source,) = yaml.safe_load((DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == source["uid"] and panel["targets"], panel["title"]
    assert source["url"] == "http://prometheus:9090"


def test_prometheus_scrapes_the_metrics_route_with_the_token_the_api_server_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    scrape = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    assert job["metrics_path"] == "/tiering/metrics"
    assert job["static_configs"] == [{"targets": ["airflow-api-server:8080"]}]
    assert job["authorization"]["type"] == "Bearer" and "credentials" not in job["authorization"]
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    services = compose["services"]
    config = parse_config(yaml.safe_load((DOCKER / "tiering.yaml").read_text()))
    token_in_api_server = str(config.metrics.bearer_token_file)

    def host_file(service: str, container_path: str) -> str:
        (mount,) = [m for m in mounts(services[service]) if m.target == container_path]
        return mount.source

    # One host file, seen by the API server as its bearer_token_file and by Prometheus as its credentials.
    assert host_file("airflow-api-server", token_in_api_server) == host_file(
        "prometheus", job["authorization"]["credentials_file"]
    )
    assert host_file("prometheus", "/etc/prometheus/prometheus.yml") == "./prometheus/prometheus.yml"
    for service in ("prometheus", "grafana"):
        assert re.fullmatch(r"[\w/.-]+:v?\d+\.\d+\.\d+", services[service]["image"]), "pin the image's version"
    providers = yaml.safe_load((DOCKER / "grafana" / "provisioning" / "dashboards" / "kafka-tiering.yml").read_text())
    (provider,) = providers["providers"]
    assert host_file("grafana", provider["options"]["path"]) == "./grafana/dashboards"
    assert host_file("grafana", "/etc/grafana/provisioning") == "./grafana/provisioning"
    assert "docker/metrics-token" in (ROOT / ".gitignore").read_text().splitlines()
    assert dockerignored("docker/metrics-token")


def test_with_unlimited_retention_and_no_quota_every_metric_the_dashboard_queries_is_exported(
    fs_env: TieringEnv,
) -> None:
    """Kafka registers its sensors when it starts: with ``retention.ms`` and ``retention.bytes``
    unlimited, no ``local.retention.*`` known and no quota, after one copy the exposition still
    holds every metric a panel queries (headroom ``+Inf``, percents and throttle times 0)."""
    config = load_config(fs_env.config_path).for_broker(1)
    topic = config.topic_config("orders")
    assert (topic.retention_ms, topic.retention_bytes, topic.local_retention_bytes) == (-1, -1, None)
    assert not fs_env.sections.get("quotas")
    w = fs_env.writer(segment_bytes=4096)
    w.append_records(100, value_size=100)
    w.roll()
    w.set_high_watermark()
    with TieringContext.open(config) as ctx:
        assert ctx.storage.quotas.copy is None and ctx.storage.quotas.fetch is None
        assert run_copy(ctx, w.tp, broker_id=1).segments_copied > 0
        text = render(collect_metrics(ctx, tasks=False))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    exported = {name for name, _ in samples}
    for query in dashboard_queries(json.loads(DASHBOARD.read_text())):
        metrics, _ = promql_names(query)
        assert metrics <= exported, (query, metrics - exported)
    replica = (("broker", "1"), ("partition", "0"), ("topic", "orders"))
    assert samples[(names.LOCAL_RETENTION_HEADROOM_SECONDS.prometheus_name, replica)] == math.inf
    for spec in (names.RETENTION_SIZE_IN_PERCENT, names.LOCAL_RETENTION_SIZE_IN_PERCENT):
        assert samples[(spec.prometheus_name, replica[1:])] == 0
    for spec in names.THROTTLE_METRICS:
        assert samples[(spec.prometheus_name, replica[:1])] == 0
