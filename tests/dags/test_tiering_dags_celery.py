"""The cluster-form copy DAG under Airflow's CeleryExecutor: a real scheduler, DAG processor and API
server on PostgreSQL, Redis as the Celery broker, and an ``airflow celery worker`` per broker host
consuming only that broker's queue. With broker 1's worker alone, broker 1's tasks run there and
broker 2's wait queued; with both, a run triggered through the REST API copies each partition once,
on the worker of its best replica.

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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.airflow_support import AIRFLOW_BIN, ROOT, load_e2e_script
from tests.dags.test_tiering_dags_cluster import QUEUES, Cluster, cluster_doc, with_segments
from tests.services import PostgresServer, RedisServer, S3Endpoint
from tests.tier.test_replica import append
from tiering_core.config import load_config, select_broker
from tiering_core.context import AwsCredentials, TieringContext
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy_plan import plan_copies

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


@dataclass
class CeleryAirflow:
    """A running Airflow under the CeleryExecutor: its environment, metadata database and logs."""

    env: dict[str, str]
    db_url: str
    port: int
    logs: Path

    def run(self, *args: str) -> str:
        proc = subprocess.run([AIRFLOW_BIN, *args], env=self.env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        return proc.stdout

    def wait_for_dag(self) -> None:
        wait_for("the DAG parsed", lambda: DAG_ID in self.run("dags", "list", "-o", "plain"), 240, self.logs)


@contextmanager
def celery_airflow(
    tmp_path: Path,
    cluster: Cluster,
    s3_endpoint: S3Endpoint,
    pg_server: PostgresServer,
    redis: RedisServer,
    workers: dict[int, str],
) -> Iterator[CeleryAirflow]:
    """API server, scheduler and DAG processor on PostgreSQL, and per broker id of ``workers`` one
    ``airflow celery worker`` consuming only that queue, as on that broker's host."""
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
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
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
        airflow = CeleryAirflow(env, airflow_db, port, logs)
        airflow.run("db", "migrate")
        airflow.run("pools", "set", "tiering_uploads", "4", "concurrent uploads")
        with ExitStack() as running:
            for name, args in (
                ("api-server", [AIRFLOW_BIN, "api-server", "--port", str(port)]),
                ("scheduler", [AIRFLOW_BIN, "scheduler"]),
                ("dag-processor", [AIRFLOW_BIN, "dag-processor"]),
            ):
                running.enter_context(started(name, args, env, logs))
            for broker_id, queue in workers.items():
                worker = [AIRFLOW_BIN, "celery", "worker", "--queues", queue, "--concurrency", "2"]
                worker += ["--celery-hostname", f"broker-{broker_id}@%h"]
                worker_env = {**env, "TIERING_BROKER_ID": str(broker_id)}  # that broker's host
                running.enter_context(started(f"worker-{broker_id}", worker, worker_env, logs))
            yield airflow


def test_a_broker_s_tasks_run_on_the_celery_worker_of_its_queue(
    tmp_path: Path, s3_endpoint: S3Endpoint, pg_server: PostgresServer, redis: RedisServer
) -> None:
    remote = {"backend": "s3", "bucket": s3_endpoint.new_bucket(), "prefix": "t/", "region": "us-east-1"}
    cluster = Cluster(tmp_path, tmp_path / "tiering.yaml", cluster_doc(tmp_path, remote, orders={}))
    cluster.write()
    on_1 = [with_segments(cluster.writer(1, "orders", p), 2) for p in (0, 2)]
    with_segments(cluster.writer(2, "orders", 1), 1)
    with celery_airflow(tmp_path, cluster, s3_endpoint, pg_server, redis, {1: QUEUES[1]}) as airflow:
        airflow.wait_for_dag()
        airflow.run("dags", "unpause", DAG_ID)
        airflow.run("dags", "trigger", DAG_ID)

        def copied() -> dict[tuple[str, int], dict[str, Any]] | None:
            tis = task_instances(airflow.db_url)
            done = [ti for (task_id, _), ti in tis.items() if task_id == "broker_1.copy"]
            return tis if len(done) == 2 and all(ti["state"] == "success" for ti in done) else None

        tis = wait_for("broker 1's copies", copied, 420, airflow.logs)
        logs = airflow.logs
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


TOPIC_ID = "mYmOgOlwTqyLnR1xXuOhUA"


def replica(cluster: Cluster, broker_id: int, partition: int) -> PartitionWriter:
    """Broker ``broker_id``'s replica of orders-``partition``: the same records on every broker."""
    return PartitionWriter(
        cluster.log_dir(broker_id),
        TopicPartition("orders", partition),
        topic_id=TOPIC_ID,
        segment_bytes=10**9,
        seed=42 + partition,
        node_id=broker_id,
    )


def xcom_values(db_url: str, run_id: str, key: str, task_id: str) -> list[tuple[str, Any]]:
    """``(task_id, value)`` of the run's XComs named ``key`` of the tasks matching ``task_id`` (LIKE)."""
    import psycopg

    with psycopg.connect(db_url.replace("postgresql+psycopg", "postgresql")) as conn:
        rows = conn.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = %s AND run_id = %s AND key = %s AND task_id LIKE %s",
            (DAG_ID, run_id, key, task_id),
        ).fetchall()
    return [(task_id, json.loads(value) if isinstance(value, str) else value) for task_id, value in rows]


def copy_results(db_url: str, run_id: str) -> dict[str, dict[int, dict[str, Any]]]:
    """Each broker group's copy results (XCom: a list per lane) by partition."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for task_id, value in xcom_values(db_url, run_id, "return_value", "broker_%.copy"):
        for result in value:
            found.setdefault(task_id.split(".")[0], {})[result["partition"]] = result
    return found


def skipped_reasons(db_url: str, run_id: str) -> dict[str, dict[int, str]]:
    """Each broker group's skipped partitions with the reason its sensor's plan gave (XCom ``copy_skipped``)."""
    found: dict[str, dict[int, str]] = {}
    for task_id, value in xcom_values(db_url, run_id, "copy_skipped", "broker_%.wait_for_eligible_segment"):
        for _topic, partition, reason in value:
            found.setdefault(task_id.split(".")[0], {})[partition] = reason
    return found


def test_two_workers_copy_each_partition_once_on_the_worker_of_its_best_replica(
    tmp_path: Path, s3_endpoint: S3Endpoint, pg_server: PostgresServer, redis: RedisServer
) -> None:
    """Two brokers hold replicas of orders-0 and orders-1, each lagging on one of them; one Celery
    worker per broker host consumes only its queue. A run triggered through the REST API copies
    each partition once, on the worker of its best replica, the other broker's task saying why it
    skipped, and every offset is served once."""
    remote = {"backend": "s3", "bucket": s3_endpoint.new_bucket(), "prefix": "t/", "region": "us-east-1"}
    cluster = Cluster(tmp_path, tmp_path / "tiering.yaml", cluster_doc(tmp_path, remote, orders={}))
    cluster.write()
    ahead = {0: 1, 1: 2}  # the broker holding each partition's more advanced replica
    for partition, leader in ahead.items():
        for broker in (1, 2):
            w = replica(cluster, broker, partition)
            if broker == leader:
                append(w, 15, rolls=(5, 10))
                w.set_high_watermark(14)
            else:
                append(w, 15, rolls=(5,))
                w.set_high_watermark(8)  # a lagging follower
    # Both brokers have reported their replicas (as their status or sensor runs do all day).
    tps = [TopicPartition("orders", p) for p in ahead]
    for broker in (1, 2):
        with TieringContext.open(select_broker(load_config(cluster.config_path), broker)) as ctx:
            plan_copies(ctx, tps, broker_id=broker)
    workers = {1: QUEUES[1], 2: QUEUES[2]}
    with celery_airflow(tmp_path, cluster, s3_endpoint, pg_server, redis, workers) as airflow:
        airflow.wait_for_dag()
        airflow.run("dags", "unpause", DAG_ID)
        e2e = load_e2e_script()
        api = e2e.Api(f"http://127.0.0.1:{airflow.port}")
        e2e.wait_for("the API server", lambda: api.call("GET", "/api/v2/monitor/health")[0] == 200, 120)
        passwords = Path(airflow.env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
        api.login(json.loads(passwords.read_text())["admin"])
        run_id = api.trigger(DAG_ID)
        assert api.wait_run(DAG_ID, run_id, 420) == "success"
        tis = task_instances(airflow.db_url)
        results = copy_results(airflow.db_url, run_id)
        skipped = skipped_reasons(airflow.db_url, run_id)
    for (task_id, _), ti in tis.items():
        if task_id.endswith(".copy"):
            group = task_id.split(".")[0]
            assert (ti["queue"], ti["state"]) == (workers[int(group[-1])], "success"), (task_id, ti)
    for partition, leader in ahead.items():
        # The run is planned once, by each broker's sensor: the follower's plan gives the partition
        # no lane and says why, so its copy task never touches it.
        follower = 3 - leader
        copied = results[f"broker_{leader}"][partition]
        assert copied["skipped_reason"] is None and copied["segments_copied"] == 2, copied
        assert partition not in results.get(f"broker_{follower}", {}), results
        reason = skipped[f"broker_{follower}"][partition]
        assert reason == f"broker {leader} holds a more advanced replica (LSO 14 > 8)"
    # S3 as the tasks reach it: through the Airflow connection's credentials and endpoint.
    credentials = AwsCredentials("AKIDTIERINGTEST", "celery-test-secret", endpoint_url=s3_endpoint.url)
    with TieringContext.open(load_config(cluster.config_path), credentials) as ctx:
        for partition in ahead:
            tip = TopicIdPartition(TOPIC_ID, TopicPartition("orders", partition))
            finished = sorted(
                (s.start_offset, s.end_offset)
                for s in ctx.metadata.list_segments(tip)
                if s.state.value == "COPY_SEGMENT_FINISHED"
            )
            assert finished == [(0, 4), (5, 9)]
            assert [r.offset for r in open_reader(ctx, tip.topic_partition).read(0, 1000)] == list(range(10))
    for broker in (1, 2):
        worker_log = (airflow.logs / f"worker-{broker}.log").read_text(errors="replace")
        assert f"broker-{broker}@" in worker_log and workers[broker] in worker_log
