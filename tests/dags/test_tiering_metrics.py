"""The copy DAG's metrics through Airflow's own pipeline, end to end: ``dag.test()`` of the copy DAG
of a two-broker cluster, in a fresh process whose ``[metrics]`` settings turn StatsD (a UDP socket
in the test is the server) or OpenTelemetry (the SDK's in-memory reader on the MeterProvider
Airflow builds, and an OTLP endpoint in the test as the collector) on. Airflow reads those settings
when its stats start, which a task process does once, at its start: hence the fresh process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from tests.airflow_support import ROOT, airflow_env, task_runs
from tests.dags.test_tiering_dags import DAGS
from tests.dags.test_tiering_dags_cluster import Cluster, cluster_doc, with_segments
from tests.engine_support import TieringEnv, tip_of
from tests.metrics_support import OtlpReceiver, StatsdListener
from tests.services import S3Endpoint
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.values import PartitionCounters
from tiering_core.monitoring.collect import collect_metrics
from tiering_core.storage.layout import ObjectKind, partition_prefix

DAG_ID = "tiering_copy__orders"

# Runs the copy DAG once and prints its run id and state (and, for OpenTelemetry, what the SDK's
# in-memory reader collected). Stats start from the [metrics] settings as a task process's do.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability.metrics import stats_utils
    from airflow.sdk.observability.stats import Stats

    otel = sys.argv[1] == "otel"
    if otel:
        from airflow.sdk._shared.observability.metrics import otel_logger
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from tests.metrics_support import reader_points, with_reader

        reader = InMemoryMetricReader()
        otel_logger.MeterProvider = with_reader(reader)
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=sys.argv[2]).dags[sys.argv[3]]
    Stats.initialize(
        factory=stats_utils.get_stats_factory(), export_legacy_names=conf.getboolean("metrics", "legacy_names_on")
    )
    run = dag.test()
    out = {"state": run.state, "run_id": run.run_id}
    if otel:
        out["points"] = reader_points(reader, "airflow.tiering.")
    print(json.dumps(out))
    """
)


@pytest.fixture()
def cluster(tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """Two brokers' log dirs, the tier on moto's S3 server (``tiering``'s bucket and connection)."""
    c = Cluster(tiering.root, tiering.config_path, cluster_doc(tiering.root, tiering.remote, orders={}))
    c.write()
    monkeypatch.setenv("TIERING_SENSOR_POKE_SECONDS", "0.2")
    monkeypatch.delenv("TIERING_SENSOR_DEFERRABLE", raising=False)
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    return c


@pytest.fixture()
def statsd_listener() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    yield listener
    listener.close()


@pytest.fixture()
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def run_copy_dag(mode: str, metrics: dict[str, str]) -> dict[str, Any]:
    settings = {f"AIRFLOW__METRICS__{key.upper()}": value for key, value in metrics.items()}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(DAGS / "tiering_dags.py"), DAG_ID],
        env={**os.environ, **airflow_env(), **settings},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["state"] == "success"
    return out


def two_brokers(cluster: Cluster) -> dict[tuple[str, str], PartitionWriter]:
    """orders-0 and orders-2 on broker 1 with 2 segments to copy, orders-1 on broker 2 with 3."""
    writers = {(str(p), "1"): with_segments(cluster.writer(1, "orders", p), 2) for p in (0, 2)}
    writers[("1", "2")] = with_segments(cluster.writer(2, "orders", 1), 3)
    return writers


def segment_id_of(key: str) -> str:
    """The segment id in an object's key (``.../<base>-<uuid>.<kind>``)."""
    return key.rsplit("/", 1)[1].split("-", 1)[1][:36]


@dataclass(frozen=True)
class Copied:
    """What the store and the bucket have of a partition's copy."""

    segments: int  # COPY_SEGMENT_FINISHED in the store
    log_bytes: int  # their size in the store: the remote log size
    object_bytes: int  # what the bucket holds for them, each segment's objects but its manifest
    counters: PartitionCounters  # the store's counters of the partition's broker


def copied(cluster: Cluster, s3_endpoint: S3Endpoint, w: PartitionWriter, broker: int) -> Copied:
    with TieringContext.open(load_config(cluster.config_path)) as ctx:
        done = {
            str(s.segment_id): s.size_bytes
            for s in ctx.metadata.list_segments(tip_of(w))
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        }
        (figures,) = [p for p in collect_metrics(ctx, w.tp.topic).partitions if p.partition == w.tp.partition]
    remote = cluster.doc["remote"]
    listing = s3_endpoint.client().list_objects_v2(
        Bucket=remote["bucket"], Prefix=partition_prefix(tip_of(w), remote["prefix"])
    )
    objects = [o for o in listing.get("Contents", []) if segment_id_of(o["Key"]) in done]
    assert {segment_id_of(o["Key"]) for o in objects} == set(done)
    return Copied(
        len(done),
        sum(done.values()),
        sum(o["Size"] for o in objects if not o["Key"].endswith(ObjectKind.MANIFEST.value)),
        figures.counters_by_broker[broker],
    )


def statsd_totals(lines: list[str], prefix: str) -> dict[str, dict[tuple[str, ...], float]]:
    """Per metric and tag values, the sum of a counter's increments or a gauge's last value."""
    totals: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    for line in lines:
        name_and_tags, _, rest = line.partition(":")
        if not name_and_tags.startswith(prefix):
            continue  # Airflow's own metrics of the run
        name, *tags = name_and_tags.split(",")
        value, kind = rest.split("|")[:2]
        key = tuple(tags)
        series = totals[name.removeprefix(prefix)]
        series[key] = series.get(key, 0) + float(value) if kind == "c" else float(value)
    return dict(totals)


def test_copy_dag_metrics_reach_a_statsd_server_with_names_tags_and_values(
    cluster: Cluster, s3_endpoint: S3Endpoint, statsd_listener: StatsdListener
) -> None:
    writers = two_brokers(cluster)
    out = run_copy_dag(
        "statsd",
        {
            "statsd_on": "True",
            "statsd_host": "127.0.0.1",
            "statsd_port": str(statsd_listener.port),
            "statsd_prefix": "airflow",
            "statsd_influxdb_enabled": "True",
        },
    )
    totals = statsd_totals(statsd_listener.drain(), "airflow.tiering.")

    copies = {
        label: task.result[0]
        for group in ("broker_1", "broker_2")
        for label, task in task_runs(DAG_ID, out["run_id"], f"{group}.copy").items()
    }
    for (partition, broker), w in writers.items():
        done = copied(cluster, s3_endpoint, w, int(broker))
        assert done.segments == copies[f"orders-{partition}"]["segments_copied"] == {"0": 2, "2": 2, "1": 3}[partition]
        replica = ("topic=orders", f"partition={partition}", f"broker={broker}")
        assert totals["remote_copy_requests"][replica] == done.segments == done.counters.copy_requests
        assert totals["remote_copy_bytes"][replica] == done.object_bytes == done.counters.copy_bytes
        assert replica not in totals.get("remote_copy_errors", {}) and done.counters.copy_errors == 0
        assert totals["local_retention_risk"][replica] == 0
        # The gauges the copy run left: nothing behind, the remote log as the store has it, and
        # KIP-1257's retention percent (0: retention.bytes is unlimited; local.retention.bytes not
        # known, so no local percent).
        at_end = {name: series[replica[:2]] for name, series in totals.items() if replica[:2] in series}
        assert at_end == {
            "remote_copy_lag_bytes": 0,
            "remote_copy_lag_segments": 0,
            "remote_log_size_bytes": done.log_bytes,
            "remote_log_metadata_entries": done.segments,
            "retention_size_in_percent": 0,
        }
    # Only the replicas that copied: broker 2 never reported orders-0 or orders-2.
    assert sorted(totals["remote_copy_requests"]) == sorted(
        ("topic=orders", f"partition={p}", f"broker={b}") for p, b in writers
    )


def test_copy_dag_metrics_reach_opentelemetry_with_their_attributes(
    cluster: Cluster, s3_endpoint: S3Endpoint, otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers = two_brokers(cluster)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", otlp_receiver.url)  # Airflow's own exporter's
    out = run_copy_dag("otel", {"otel_on": "True", "otel_prefix": "airflow"})
    points = {
        name: {tuple(sorted(attributes.items())): value for attributes, value in series}
        for name, series in out["points"].items()
    }
    for (partition, broker), w in writers.items():
        done = copied(cluster, s3_endpoint, w, int(broker))
        on_partition = (("partition", partition), ("topic", "orders"))
        replica = (("broker", broker), *on_partition)
        assert points["airflow.tiering.remote_copy_requests"][replica] == done.segments
        assert points["airflow.tiering.remote_copy_bytes"][replica] == done.object_bytes
        assert points["airflow.tiering.remote_log_size_bytes"][on_partition] == done.log_bytes
        assert points["airflow.tiering.remote_copy_lag_segments"][on_partition] == 0
    assert set(out["points"]) <= otlp_receiver.metric_names()  # the collector got them too, at the process's exit


def test_the_readme_s_single_broker_form_scrapes_the_gauges_after_a_copy(
    tiering: TieringEnv, s3_endpoint: S3Endpoint, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/metrics.md: the single-broker form (``log_dirs:``, no ``--broker``, no
    ``TIERING_BROKER_ID``) records under the ``node.id`` its log dir's ``meta.properties`` names, so
    after ``tiering copy`` of one partition of three segments, and after the copy DAG's task of
    another, ``/tiering/metrics`` holds each partition's copy lag, local-retention and retention
    gauges and the broker's ``silent_broker``; a ``status`` computes the delete lag (0 until then)."""
    from tests.cli.test_commands import run
    from tests.dags.test_tiering_dags import dagbag
    from tests.engine_support import write_segments
    from tests.tiering_airflow.ui.test_metrics import SCRAPE_ENV, TOKEN, bearer, scraped
    from tiering_airflow.ui.app import create_app

    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    monkeypatch.setenv(SCRAPE_ENV, TOKEN)
    tiering.write_config(events={})
    doc = yaml.safe_load(tiering.config_path.read_text())
    doc["remote"]["endpoint_url"] = s3_endpoint.url  # the command's S3 (a task's comes from aws_default)
    doc["metrics"] = {"bearer_token_env": SCRAPE_ENV}
    tiering.config_path.write_text(yaml.safe_dump(doc))
    cfg = str(tiering.config_path)
    by_command, by_task = tiering.writer("events", 0), tiering.writer("events", 1)
    for w in (by_command, by_task):
        write_segments(w, 3)
        w.append_records(2)  # the active segment
        w.set_high_watermark()
    assert (by_command.path.parent / "meta.properties").read_text().count("node.id=1") == 1

    def scrape() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        answer = TestClient(create_app(cfg), headers=bearer(TOKEN)).get("/metrics?topic=events")
        assert answer.status_code == 200, answer.text
        return scraped(answer.text)

    def labels(w: PartitionWriter, broker: int | None = None) -> tuple[tuple[str, str], ...]:
        found = [("partition", str(w.tp.partition)), ("topic", w.tp.topic)]
        return tuple(sorted(found + ([("broker", str(broker))] if broker is not None else [])))

    def remote_bytes(w: PartitionWriter) -> int:
        with TieringContext.open(load_config(cfg)) as ctx:
            return sum(s.size_bytes for s in ctx.metadata.list_segments(tip_of(w)))

    def assert_gauges(samples: dict[str, dict[tuple[tuple[str, str], ...], float]], w: PartitionWriter) -> None:
        assert samples["tiering_remote_copy_lag_bytes"][labels(w)] == 0
        assert samples["tiering_remote_copy_lag_segments"][labels(w)] == 0
        assert samples["tiering_remote_log_size_bytes"][labels(w)] == remote_bytes(w) > 0
        assert samples["tiering_local_retention_risk"][labels(w, 1)] == 0
        assert samples["tiering_retention_size_in_percent"][labels(w)] == 0  # retention.bytes -1: unlimited
        # its limit is not known: 0, as Kafka's gauge reads until its first computation
        assert samples["tiering_local_retention_size_in_percent"][labels(w)] == 0
        assert samples["tiering_local_retention_headroom_seconds"][labels(w, 1)] == math.inf  # nothing waits
        assert samples["tiering_silent_broker"] == {(("broker", "1"),): 0}

    code, _, err = run(capsys, "--config", cfg, "copy", "--topic", "events", "--partition", "0")
    assert code == 0, err
    samples = scrape()
    assert_gauges(samples, by_command)
    assert labels(by_task) not in samples.get("tiering_remote_copy_lag_bytes", {})  # nothing has seen it yet
    assert samples["tiering_remote_delete_lag_bytes"][labels(by_command)] == 0  # a copy computes none: 0 until one does

    # The copy DAG's task, on the worker's broker as the log dir names it.
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__events"]
    dag_run = dag.test()
    assert dag_run.state == "success"
    copies = task_runs(dag.dag_id, dag_run.run_id, "copy")
    assert copies["events-1"].result[0]["segments_copied"] == 3
    samples = scrape()
    for w in (by_command, by_task):
        assert_gauges(samples, w)
    assert samples["tiering_dag_run_failed"][(("dag_id", dag.dag_id),)] == 0  # its latest run succeeded

    code, _, err = run(capsys, "--config", cfg, "status")
    assert code == 0, err
    samples = scrape()
    for w in (by_command, by_task):
        assert samples["tiering_remote_delete_lag_bytes"][labels(w)] == 0
        assert samples["tiering_remote_delete_lag_segments"][labels(w)] == 0
