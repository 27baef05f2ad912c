"""The cluster-form copy DAG under Airflow's CeleryExecutor: a real scheduler, DAG processor and API
server on PostgreSQL, Redis as the Celery broker, and one ``airflow celery worker`` consuming only
``tiering-broker-1`` on "broker 1's host". Broker 1's tasks land on that queue and run there;
broker 2's wait queued, since no worker consumes its queue.

Celery is pinned to 5.6 (and the redis client below 6.5, as its kombu asks): the provider imports
what Celery 5.7 removed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.airflow_support import AIRFLOW_BIN, ROOT
from tests.dags.test_tiering_dags_cluster import Cluster, cluster_doc, with_segments
from tests.services import PostgresServer, RedisServer, S3Endpoint

pytestmark = pytest.mark.slow
T = TypeVar("T")
DAG_ID = "tiering_copy__orders"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, check: Callable[[], T | None], timeout: float, logs: Path) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logs.glob("*.log")))
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{tails}")


@contextmanager
def started(name: str, args: list[str], env: dict[str, str], logs: Path) -> Iterator[subprocess.Popen[bytes]]:
    """An Airflow process in a session of its own, stopped (its whole group) at the end."""
    with (logs / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        for signum, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, signum)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


def task_instances(pg_url: str) -> dict[tuple[str, int], dict[str, Any]]:
    import psycopg

    with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql")) as conn:
        rows = conn.execute(
            "SELECT task_id, map_index, state, queue, hostname FROM task_instance WHERE dag_id = %s", (DAG_ID,)
        ).fetchall()
    return {(r[0], r[1]): {"state": r[2], "queue": r[3], "hostname": r[4]} for r in rows}


def test_a_broker_s_tasks_run_on_the_celery_worker_of_its_queue(
    tmp_path: Path, s3_endpoint: S3Endpoint, pg_server: PostgresServer, redis: RedisServer
) -> None:
    remote = {"backend": "s3", "bucket": s3_endpoint.new_bucket(), "prefix": "t/", "region": "us-east-1"}
    cluster = Cluster(tmp_path, tmp_path / "tiering.yaml", cluster_doc(tmp_path, remote, orders={}))
    cluster.write()
    on_1 = [with_segments(cluster.writer(1, "orders", p), 2) for p in (0, 2)]
    with_segments(cluster.writer(2, "orders", 1), 1)
    logs = tmp_path / "logs"
    logs.mkdir()
    port = free_port()
    with pg_server.database() as airflow_db:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env = {
            **base,
            # This checkout's packages, whatever the interpreter has installed.
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"), *filter(None, [base.get("PYTHONPATH")])]),
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_db,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": airflow_db,  # psycopg 3 is async too
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{redis.host}:{redis.port}/7",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"redis://{redis.host}:{redis.port}/8",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": "celery-test-" + "x" * 52,
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
                {
                    "conn_type": "aws",
                    "login": "AKIDTIERINGTEST",
                    "password": "celery-test-secret",
                    "extra": {"endpoint_url": s3_endpoint.url, "region_name": "us-east-1"},
                }
            ),
            "TIERING_CONFIG": str(cluster.config_path),
            "TIERING_SENSOR_POKE_SECONDS": "2",
        }
        env.pop("TIERING_BROKER_ID", None)
        env.pop("TIERING_SENSOR_DEFERRABLE", None)

        def airflow(*args: str) -> str:
            proc = subprocess.run([AIRFLOW_BIN, *args], env=env, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
            return proc.stdout

        airflow("db", "migrate")
        airflow("pools", "set", "tiering_uploads", "4", "concurrent uploads")
        worker_env = {**env, "TIERING_BROKER_ID": "1"}  # broker 1's host
        worker = [AIRFLOW_BIN, "celery", "worker", "--queues", "tiering-broker-1", "--concurrency", "2"]
        with (
            started("api-server", [AIRFLOW_BIN, "api-server", "--port", str(port)], env, logs),
            started("scheduler", [AIRFLOW_BIN, "scheduler"], env, logs),
            started("dag-processor", [AIRFLOW_BIN, "dag-processor"], env, logs),
            started("worker-1", worker, worker_env, logs),
        ):
            wait_for("the DAG parsed", lambda: DAG_ID in airflow("dags", "list", "-o", "plain"), 240, logs)
            airflow("dags", "unpause", DAG_ID)
            airflow("dags", "trigger", DAG_ID)

            def copied() -> dict[tuple[str, int], dict[str, Any]] | None:
                tis = task_instances(airflow_db)
                done = [ti for (task_id, _), ti in tis.items() if task_id == "broker_1.copy"]
                return tis if len(done) == 2 and all(ti["state"] == "success" for ti in done) else None

            tis = wait_for("broker 1's copies", copied, 420, logs)
    for (task_id, _), ti in tis.items():
        if task_id.startswith("broker_1."):
            assert (ti["queue"], ti["state"]) == ("tiering-broker-1", "success"), task_id
            assert ti["hostname"], task_id  # a worker ran it
        else:
            assert ti["queue"] == "kafka-b-host", task_id
            assert ti["state"] in ("queued", "scheduled", None), (task_id, ti)  # no worker serves it
            assert not ti["hostname"], task_id
    assert ("broker_2.wait_for_eligible_segment", -1) in tis
    assert [cluster.finished(w) for w in on_1] == [[(0, 4), (5, 9)]] * 2
    assert [cluster.observers(w) for w in on_1] == [[1], [1]]
    worker_log = (logs / "worker-1.log").read_text(errors="replace")
    assert "tiering-broker-1" in worker_log
    assert yaml.safe_load(cluster.config_path.read_text())["brokers"][2]["queue"] == "kafka-b-host"
