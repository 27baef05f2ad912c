"""With a ``kafka:`` section whose SASL password is not in their environment, the Airflow processes
that never ask the cluster (the DAG processor, the scheduler, the API server) still parse the
config, build the DAGs, serve the Tiering page and ``/tiering/metrics``: only a run that connects
reads the password (tests/live/test_source.py)."""

from __future__ import annotations

import pytest
import yaml
from fastapi.testclient import TestClient

from tests.airflow_support import ROOT
from tests.engine_support import TieringEnv, write_segments
from tests.tiering_airflow.ui.test_app import BROKER, COOKIE, token_for
from tests.tiering_airflow.ui.test_metrics import TOKEN, bearer, with_token_file
from tiering_airflow.ui.app import create_app
from tiering_core.config import load_config
from tiering_core.runs.copy import run_copy

PASSWORD_ENV = "TIERING_TEST_UNSET_SASL_PASSWORD"


@pytest.fixture(scope="module")
def auth_manager():
    from airflow.api_fastapi.app import init_auth_manager

    return init_auth_manager()


def test_dags_page_and_metrics_work_without_the_sasl_password(
    tiering: TieringEnv, auth_manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    tiering.write_config(orders={}, payments={})
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    with tiering.context() as ctx:  # what a worker copied before (its environment had the password)
        assert run_copy(ctx, w.tp, broker_id=BROKER).segments_copied == 2
    with_token_file(tiering)
    doc = yaml.safe_load(tiering.config_path.read_text())
    doc["kafka"] = {
        "bootstrap_servers": "broker1:9092,broker2:9092",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "tiering",
        "sasl_password_env": PASSWORD_ENV,
    }
    tiering.config_path.write_text(yaml.safe_dump(doc))
    monkeypatch.delenv(PASSWORD_ENV, raising=False)

    config = load_config(tiering.config_path)  # every process parses it
    assert config.kafka is not None and config.kafka.sasl_password_env == PASSWORD_ENV

    bag = DagBag(dag_folder=str(ROOT / "dags"))  # the DAG processor
    assert bag.import_errors == {}
    assert {"tiering_copy__orders", "tiering_retention__payments", "tiering_delete_partition"} <= set(bag.dag_ids)

    app = create_app(str(tiering.config_path))  # the API server
    viewer = TestClient(app, cookies={COOKIE: token_for(auth_manager, "viewer")})
    page = viewer.get("/")
    assert page.status_code == 200 and 'data-topic="orders"' in page.text
    partitions = viewer.get("/api/partitions")
    assert partitions.status_code == 200
    assert [(p["topic"], p["partition"], p["remote_segments"]) for p in partitions.json()] == [("orders", 0, 2)]
    assert viewer.get("/fragments/partitions", params={"topic": "orders"}).status_code == 200
    scrape = TestClient(app, headers=bearer(TOKEN)).get("/metrics")
    assert scrape.status_code == 200 and 'topic="orders"' in scrape.text
