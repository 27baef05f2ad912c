"""``/tiering/metrics`` answers only an Airflow user allowed to see plugin views (as the page) or a
scraper presenting the config's static token; everyone else gets 401 (403: an Airflow user
without the permission), before anything is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.cli.test_commands import run
from tests.engine_support import TieringEnv, tip_of, write_segments
from tests.tiering_airflow.ui.test_app import COOKIE, token_for
from tiering_airflow.ui.app import create_app
from tiering_core.metadata.values import NO_BROKER, PartitionCounters

TOKEN = "scrape-token-7b1f0e2a9c4d4e31"


@pytest.fixture(scope="module")
def auth_manager():
    """Airflow's configured auth manager (the simple one), initialised as the API server does."""
    from airflow.api_fastapi.app import init_auth_manager

    return init_auth_manager()


def with_token_file(tiering: TieringEnv, token: str = TOKEN) -> Path:
    """The env's config with ``metrics.bearer_token_file`` naming a file holding ``token``."""
    secret = tiering.root / "scrape-token"
    secret.write_text(token + "\n")
    doc = yaml.safe_load(tiering.config_path.read_text())
    doc["metrics"] = {"bearer_token_file": str(secret)}
    tiering.config_path.write_text(yaml.safe_dump(doc))
    return secret


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_anonymous_forged_and_unauthorised_scrapes_are_refused_before_any_state_is_read(
    tiering: TieringEnv, auth_manager
) -> None:
    with_token_file(tiering)
    tiering.writer("orders", 0).append_records(1)
    app = create_app(str(tiering.config_path))
    anonymous = TestClient(app).get("/metrics")
    assert anonymous.status_code == 401 and "orders" not in anonymous.text
    assert anonymous.headers["www-authenticate"] == "Bearer"
    for wrong in (TOKEN[:-1], TOKEN + "x", "not-a-jwt", token_for(auth_manager, "admin")[:-4] + "AAAA"):
        answer = TestClient(app, headers=bearer(wrong)).get("/metrics")
        assert answer.status_code == 401 and "orders" not in answer.text, wrong
    assert TestClient(app, headers={"Authorization": f"Basic {TOKEN}"}).get("/metrics").status_code == 401
    forged = TestClient(app, cookies={COOKIE: "not-a-jwt"}).get("/metrics")
    assert forged.status_code == 403 and "orders" not in forged.text  # as the page answers it
    no_role = TestClient(app, headers=bearer(token_for(auth_manager, None, "nobody"))).get("/metrics")
    assert no_role.status_code == 403 and "orders" not in no_role.text
    by_cookie = TestClient(app, cookies={COOKIE: token_for(auth_manager, None, "nobody")}).get("/metrics")
    assert by_cookie.status_code == 403


def test_the_page_routes_still_require_airflow_access(tiering: TieringEnv, auth_manager) -> None:
    """Each page route carries Airflow's check (the app no longer does): the static token opens
    /metrics only. (Airflow's auth manager is initialised, as on an API server, so the check runs.)"""
    with_token_file(tiering)
    app = create_app(str(tiering.config_path))
    paths = [route.path for route in app.routes if isinstance(route, APIRoute) and route.path != "/metrics"]
    assert "/" in paths and "/api/partitions" in paths
    for path in paths:
        assert TestClient(app).get(path).status_code == 401, path
        assert TestClient(app, headers=bearer(TOKEN)).get(path).status_code == 403, path


def test_a_broken_config_is_not_revealed_to_a_scraper(tiering: TieringEnv, auth_manager) -> None:
    app = create_app(str(tiering.root / "absent.yaml"))
    answer = TestClient(app, headers=bearer(TOKEN)).get("/metrics")
    assert answer.status_code == 401 and "absent.yaml" not in answer.text
    viewer = TestClient(app, cookies={COOKIE: token_for(auth_manager, "viewer")}).get("/metrics")
    assert viewer.status_code == 503 and "cannot read config file" in viewer.text


def test_a_token_that_cannot_be_read_only_disables_the_token(tiering: TieringEnv, auth_manager) -> None:
    secret = with_token_file(tiering)
    secret.unlink()
    app = create_app(str(tiering.config_path))
    assert TestClient(app, headers=bearer(TOKEN)).get("/metrics").status_code == 401
    assert TestClient(app, cookies={COOKIE: token_for(auth_manager, "viewer")}).get("/metrics").status_code == 200


def test_a_store_that_hangs_fails_the_scrape_in_bounded_time(
    tiering: TieringEnv, auth_manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metadata store that stops answering (injected: a snapshot read that never returns): the
    scrape answers 503 within the time limit instead of hanging the API server."""
    import threading
    import time

    import tiering_core.monitoring.collect as collect_mod

    released = threading.Event()

    def hung(*args: object, **kwargs: object) -> None:
        released.wait(30)

    monkeypatch.setattr(collect_mod, "collect_metrics", hung)
    client = TestClient(
        create_app(str(tiering.config_path), status_timeout=0.5), cookies={COOKIE: token_for(auth_manager, "viewer")}
    )
    try:
        started = time.monotonic()
        answer = client.get("/metrics")
        assert time.monotonic() - started < 10
    finally:
        released.set()
    assert answer.status_code == 503 and "did not finish within" in answer.text


# --- the exposition after real runs -------------------------------------------------------------

SCRAPE_ENV = "TIERING_TEST_SCRAPE_TOKEN"
ROOT = Path(__file__).resolve().parents[3]
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scraped(text: str) -> Samples:
    """sample name -> sorted labels -> value, as Prometheus' own parser reads the exposition."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def test_the_exposition_after_a_copy_a_retention_and_a_fetch_is_the_stores_and_survives_a_restart(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Broker 1 copies, runs retention, reads; broker 2 is configured but never reports. The
    scrape equals ``tiering status --json`` (the broker's view it records), ``status --cluster``
    and the store, and a new app (and a new process) serves the same values."""
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    monkeypatch.setenv(SCRAPE_ENV, TOKEN)
    doc = yaml.safe_load(tiering_env.config_path.read_text())
    doc["brokers"] = {1: {"log_dirs": doc.pop("log_dirs")}, 2: {"log_dirs": [str(tiering_env.root / "broker-2")]}}
    doc["metrics"] = {"bearer_token_env": SCRAPE_ENV}
    tiering_env.config_path.write_text(yaml.safe_dump(doc))
    cfg = str(tiering_env.config_path)
    as_broker_1 = ("--config", cfg, "--broker", "1", "--json")

    orders = tiering_env.writer("orders", 0, node_id=1)
    write_segments(orders, 4)
    orders.set_high_watermark()
    payments = tiering_env.writer("payments", 0, node_id=1)
    write_segments(payments, 1)
    payments.set_high_watermark()
    (copied_orders, copied_payments) = cli(capsys, *as_broker_1, "copy")
    assert (copied_orders["segments_copied"], copied_payments["segments_copied"]) == (4, 1)
    with tiering_env.context() as ctx:
        remote = [s.size_bytes for s in ctx.metadata.list_segments(tip_of(orders))]
    write_segments(orders, 2)  # not copied: the copy lag
    orders.append_records(3)
    orders.set_high_watermark()
    local_above = sum(p.stat().st_size for p in sorted(orders.path.glob("*.log"))[4:])
    doc["topics"]["orders"] = {"retention.bytes": sum(remote[2:]) + local_above}  # two remote segments too many
    tiering_env.config_path.write_text(yaml.safe_dump(doc))
    retention = {r["topic"]: r for r in cli(capsys, *as_broker_1, "retention")}
    assert retention["orders"]["segments_deleted"] == 2
    fetched = cli(capsys, "--config", cfg, "--json", "fetch", "--topic", "orders", "--partition", "0", "--offset", "10")
    assert [r["offset"] for r in fetched][:3] == [10, 11, 12]
    status = {(r["topic"], r["partition"]): r for r in cli(capsys, *as_broker_1, "status")}
    cluster = {(r["topic"], r["partition"]): r for r in cli(capsys, "--config", cfg, "--json", "status", "--cluster")}

    scrape = TestClient(create_app(cfg), headers=bearer(TOKEN)).get("/metrics")
    assert scrape.status_code == 200, scrape.text
    assert scrape.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = scraped(scrape.text)

    def value(sample: str, topic: str, partition: int, broker: int | None = None) -> float:
        labels = [("partition", str(partition)), ("topic", topic)]
        if broker is not None:
            labels.append(("broker", str(broker)))
        return samples[sample][tuple(sorted(labels))]

    for (topic, partition), row in status.items():
        assert value("tiering_remote_log_size_bytes", topic, partition) == row["remote_bytes"]
        assert value("tiering_remote_log_size_bytes", topic, partition) == cluster[(topic, partition)]["remote_bytes"]
        assert value("tiering_remote_copy_lag_segments", topic, partition) == row["copy_lag_segments"]
        assert value("tiering_remote_copy_lag_bytes", topic, partition) == row["copy_lag_bytes"]
        assert value("tiering_remote_delete_lag_segments", topic, partition) == row["delete_lag_segments"]
        assert value("tiering_remote_delete_lag_bytes", topic, partition) == row["delete_lag_bytes"]
        assert value("tiering_gaps", topic, partition) == len(row["gaps"]) == 0
        risk = value("tiering_local_retention_risk", topic, partition, broker=1)
        assert risk == int(row["local_retention_risk"]["at_risk"]) == int(cluster[(topic, partition)]["at_risk"])
    assert value("tiering_remote_copy_lag_segments", "orders", 0) == 2 and status[("orders", 0)]["remote_segments"] == 2
    assert cluster[("orders", 0)]["stale_brokers"] == [2]
    assert samples["tiering_silent_broker"] == {(("broker", "1"),): 0, (("broker", "2"),): 1}

    with tiering_env.context() as ctx:
        store_counters = ctx.metadata.partition_counters()
        for tip in (tip_of(orders), tip_of(payments)):
            finished = ctx.metadata.list_segments(tip)
            assert value("tiering_remote_log_size_bytes", tip.topic, tip.partition) == sum(
                s.size_bytes for s in finished
            )
    totals: dict[tuple[str, int], PartitionCounters] = {}
    for row_counters in store_counters:
        tp = row_counters.topic_id_partition.topic_partition
        totals.setdefault((tp.topic, tp.partition), PartitionCounters()).add(row_counters.counters)
        if row_counters.broker_id != NO_BROKER:
            for field in ("copy_bytes", "copy_requests", "copy_errors"):
                name = f"tiering_remote_copy_{field.split('_')[1]}_total"
                assert value(name, tp.topic, tp.partition, row_counters.broker_id) == getattr(
                    row_counters.counters, field
                )
    for (topic, partition), total in totals.items():
        assert value("tiering_remote_delete_requests_total", topic, partition) == total.delete_requests
        assert value("tiering_remote_fetch_requests_total", topic, partition) == total.fetch_requests
        assert value("tiering_remote_fetch_bytes_total", topic, partition) == total.fetch_bytes

    # What the runs did, as counted: four and one segment copies on broker 1, two deletions, one read.
    assert value("tiering_remote_copy_requests_total", "orders", 0, broker=1) == 4
    assert value("tiering_remote_copy_requests_total", "payments", 0, broker=1) == 1
    assert value("tiering_remote_copy_bytes_total", "orders", 0, broker=1) >= copied_orders["bytes_copied"] > 0
    assert value("tiering_remote_delete_requests_total", "orders", 0) == retention["orders"]["segments_deleted"] == 2
    assert value("tiering_remote_fetch_requests_total", "orders", 0) == 1
    assert value("tiering_remote_fetch_bytes_total", "orders", 0) > 0
    for errors in ("remote_copy_errors", "remote_delete_errors", "remote_fetch_errors"):
        assert set(samples[f"tiering_{errors}_total"].values()) == {0}

    only = scraped(TestClient(create_app(cfg), headers=bearer(TOKEN)).get("/metrics?topic=payments").text)
    assert {dict(labels)["topic"] for sample in only.values() for labels in sample if "topic" in dict(labels)} == {
        "payments"
    }

    # The serving app rebuilt, then another process: the same values (ages grow with the clock).
    again = scraped(TestClient(create_app(cfg), headers=bearer(TOKEN)).get("/metrics").text)
    written = tiering_env.root / "scrape.txt"
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pathlib, sys\nfrom tiering_airflow.ui.metrics import read_exposition\n"
            "pathlib.Path(sys.argv[2]).write_text(read_exposition(sys.argv[1]))",
            cfg,
            str(written),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])},
    )
    assert process.returncode == 0, process.stderr
    elsewhere = scraped(written.read_text())
    for other in (again, elsewhere):
        for name in samples.keys() | other.keys():
            if name == "tiering_last_copy_age_seconds":
                assert other[name].keys() == samples[name].keys()
                assert all(other[name][k] >= samples[name][k] for k in samples[name])
            else:
                assert other[name] == samples[name], name


def stored_dag(dag_id: str, tags: list[str]) -> Any:
    """A DAG of one task that fails when its run's conf says ``fail``, written to Airflow's database
    as the DAG processor would (``dag.test()`` runs only stored DAGs)."""
    import datetime as dt

    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.sdk import DAG, task

    with DAG(dag_id, schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), tags=tags) as dag:

        @task
        def tier(**context: Any) -> None:
            if context["dag_run"].conf.get("fail"):
                raise RuntimeError("this run fails")

        tier()
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    return dag


def test_the_latest_finished_run_of_each_platform_dag_says_whether_it_failed(tiering: TieringEnv) -> None:
    """``tiering_dag_run_failed``: 1 for a DAG tagged ``tiering`` whose latest finished run failed, 0
    once a later run succeeded; another team's DAG is not the platform's and is left out."""
    with_token_file(tiering)
    client = TestClient(create_app(str(tiering.config_path)), headers=bearer(TOKEN))
    ours, theirs = stored_dag("tiering_alerting_copy", ["tiering", "copy"]), stored_dag("reports_daily", ["reports"])

    def failed() -> dict[str, float]:
        answer = client.get("/metrics")
        assert answer.status_code == 200, answer.text
        return {
            dict(labels)["dag_id"]: v for labels, v in scraped(answer.text).get("tiering_dag_run_failed", {}).items()
        }

    assert "tiering_alerting_copy" not in failed()  # no finished run yet
    assert ours.test(run_conf={"fail": True}).state == "failed"
    assert theirs.test(run_conf={"fail": True}).state == "failed"
    now = failed()
    assert now["tiering_alerting_copy"] == 1 and "reports_daily" not in now
    assert ours.test().state == "success"
    assert failed()["tiering_alerting_copy"] == 0
