"""The compose stack of ``docker/`` started on a real Docker engine, driven through Airflow's REST API.

Two Kafka 4.4.0 brokers in containers hold a replicated topic, each partition led by another
broker; each broker's log dir is a volume mounted read-only into its own Celery worker only.
Through the REST API only: the copy DAG tiers every closed segment from the leader's worker, also
when that worker is killed mid-copy (its retry, on the restarted container, converges with
nothing lost); retention runs; the Spark verify, export and rebuild-indexes DAGs run on the standalone master
and worker containers, submitted from the default queue's worker, which has no broker disk (the
export fills the topic's Iceberg table, in the stack's catalog, with exactly the tiered records;
the rebuild finds every segment's indexes sound); the removal DAG refuses a live topic and removes
a deleted one, leaving the exported table's files. Prometheus scrapes
``/tiering/metrics`` with the token; the Tiering page answers. A metadata store left at an older
revision is refused by the workers' commands until ``airflow-init`` upgrades it to the image's
head (its ``tiering db upgrade``, the one step that migrates it). Everything is removed at the end:
containers, networks, volumes, the engine the test started (also on failure).

The containers talk only to each other on the project's network; the test reaches the API server
on a published port of 127.0.0.1 and everything else through ``docker-compose exec``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from alembic.script import ScriptDirectory

from scripts.airflow_e2e import Api
from tests.conftest import unavailable
from tests.deploy.engine import DOCKER_DIR, Engine, base_tarball, docker_cache, docker_engine, exclusive, import_base
from tests.deploy.scripts import (
    BUCKET,
    DELETE_TOPIC,
    PRODUCE,
    RECORDS,
    ROLES,
    TOPIC,
    http_get,
)
from tests.deploy.stack import COMPOSE_FILES, Compose, Deployment, build_images, fresh_env_file
from tests.metadata.test_migrations import MIGRATIONS, script_head
from tests.real_kafka.cluster import BROKER_SETTINGS, fetch_jars
from tests.services import ServiceUnavailable, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]

T = TypeVar("T")
E2E_FILE = Path(__file__).with_name("docker-compose.e2e.yml")
#: Every service but Grafana (no Debian package; its dashboard is checked by the file tests).
SERVICES = (
    "postgres",
    "redis",
    "minio",
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker-broker-1",
    "airflow-worker-broker-2",
    "airflow-worker",
    "spark-master",
    "spark-worker",
    "prometheus",
    "kafka-1",
    "kafka-2",
)
#: With 64 KiB segments of 1 MiB per partition (tests/deploy/scripts.py), an upload quota of
#: 64 KiB/s makes a broker's copy last about 15 s, long enough to kill its worker in the middle of it.
COPY_QUOTA = 64 * 1024
COPY_DAG = f"tiering_copy__{TOPIC}"
RETENTION_DAG = f"tiering_retention__{TOPIC}"
VERIFY_DAG = "tiering_spark_verify"
EXPORT_DAG = "tiering_export"
REBUILD_DAG = "tiering_spark_rebuild_indexes"
REMOVAL_DAG = "tiering_delete_partition"
#: The export's warehouse: its own prefix of the tier's bucket (docker/tiering.yaml).
WAREHOUSE = f"s3://{BUCKET}/warehouse"
STALENESS_MS = 30_000
#: The objects of orders-0 (docs/: ``<topic>-<topicId>/<partition>/<base>-<uuid>.<kind>``).
PARTITION_0_KEY = re.compile(rf"{TOPIC}-[A-Za-z0-9_-]{{22}}/0/")


STARTED = time.monotonic()


def say(message: str) -> None:
    """A line of progress, with the seconds since the test module was loaded."""
    print(f"deploy: [{time.monotonic() - STARTED:4.0f} s] {message}", file=sys.stderr, flush=True)


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def broker_properties(node_id: int) -> str:
    settings = {
        **BROKER_SETTINGS,
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": "1@kafka-1:9093,2@kafka-2:9093",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "advertised.listeners": f"PLAINTEXT://kafka-{node_id}:9092",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": "/var/lib/kafka/data",
        "offsets.topic.replication.factor": "2",
        "transaction.state.log.replication.factor": "2",
        "default.replication.factor": "2",
        # A busy machine runs a whole stack beside them: no broker fenced for a slow heartbeat.
        "broker.session.timeout.ms": "30000",
        "broker.heartbeat.interval.ms": "2000",
        "replica.lag.time.max.ms": "30000",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def cluster_id() -> str:
    """A KRaft cluster id as Kafka makes them: 16 random bytes in URL-safe base64, never starting
    with '-' (it would read as an option)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


def platform_config(kafka_cluster_id: str) -> dict[str, Any]:
    """docker/tiering.yaml as shipped, with the test cluster's ``kafka:`` section (its cluster id:
    the removal DAG's default-queue worker reads no log dir to learn it from), the topic and a
    small upload quota."""
    config = yaml.safe_load((DOCKER_DIR / "tiering.yaml").read_text())
    config["kafka"] = {"bootstrap_servers": ["kafka-1:9092", "kafka-2:9092"], "cluster_id": kafka_cluster_id}
    config["quotas"] = {"remote.log.manager.copy.max.bytes.per.second": COPY_QUOTA}
    config["topics"][TOPIC] = {"remote.storage.enable": True}
    # A broker's observation of its replicas counts as the cluster's word that a topic id is live
    # for this long (default 30 min): short, so the removal after the deletion need not wait long.
    config["cluster"] = {"observation_staleness_ms": STALENESS_MS}
    # The export and the rebuild by hand only: no scheduled run beside the test's, holding the
    # table's or the partitions' leases.
    config["dags"] = {"export": {"schedule": None}, "spark_rebuild_indexes": {"schedule": None}}
    return dict(config)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    with ExitStack() as stack:
        cache = docker_cache()
        try:
            jars = fetch_jars()
            stack.enter_context(exclusive(cache))
            tarball = base_tarball(cache)
            engine = stack.enter_context(docker_engine(cache / "data-root"))
        except ServiceUnavailable as exc:
            unavailable("Docker engine", exc)
        work = Path(tempfile.mkdtemp(prefix="tiering-deploy-"))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        work.chmod(0o755)
        started = time.monotonic()
        try:
            forget_earlier_stacks(engine)
            import_base(engine, tarball)
            build_images(engine)  # docs/deployment.md's build: every layer cached by the test command's prepare
        except ServiceUnavailable as exc:
            raise AssertionError(f"{exc} (the test command's build: {cache / 'prepare.log'})") from exc
        say(f"images ready in {time.monotonic() - started:.0f} s")
        compose = stack_of(engine, work, kafka_libs=jars.libs)
        stack.callback(compose.run, "down", "--volumes", "--remove-orphans", "--timeout", "5", check=False, timeout=600)
        try:
            compose.run("up", "-d", *SERVICES, timeout=900)
            say(f"stack up in {time.monotonic() - started:.0f} s")
            api = Api(f"http://127.0.0.1:{compose.variables['AIRFLOW_API_PORT']}")

            def answers() -> bool:
                try:
                    return api.call("GET", "/api/v2/monitor/health")[0] == 200
                except OSError:
                    return False

            wait_for("the API server", answers, 300, 2)
            generated = "/opt/airflow/simple_auth_manager_passwords.json.generated"
            password = json.loads(compose.run("exec", "-T", "airflow-api-server", "cat", generated).stdout)["admin"]
            api.login(password)
        except (ServiceUnavailable, AssertionError) as exc:
            print(compose.run("logs", "--tail", "40", check=False).stdout[-30000:], file=sys.stderr)
            raise AssertionError(str(exc)) from exc
        yield Deployment(compose, api, work)


def forget_earlier_stacks(engine: Engine) -> None:
    """Containers, networks and volumes an earlier run left on this private engine when it was
    killed before its own clean-up (images stay: they are the cache)."""
    leftovers = engine.docker("ps", "--all", "--quiet", "--filter", "label=com.docker.compose.project").split()
    if leftovers:
        engine.docker("rm", "--force", "--volumes", *leftovers)
    engine.docker("network", "prune", "--force")
    engine.docker("volume", "prune", "--force")


def stack_of(engine: Engine, work: Path, *, kafka_libs: Path) -> Compose:
    """The test's env file, token, config and brokers' properties in ``work``, and the compose
    project that uses them (the files of docs/deployment.md plus the brokers of docker-compose.e2e.yml)."""
    env_file = work / "tiering.env"
    fresh_env_file(env_file)
    token = work / "metrics-token"
    token.write_text(os.urandom(32).hex() + "\n")
    os.chown(token, 0, 50000)  # docs/deployment.md's recipe: group 50000 (the containers' users) may read it
    token.chmod(0o440)
    kafka_cluster_id = cluster_id()
    config = work / "tiering.yaml"
    config.write_text(yaml.safe_dump(platform_config(kafka_cluster_id)))
    config.chmod(0o444)
    for node in (1, 2):
        props = work / f"kafka-{node}.properties"
        props.write_text(broker_properties(node))
        props.chmod(0o444)
    return Compose(
        engine,
        f"tiering-e2e-{os.getpid()}",
        env_file,
        files=(*COMPOSE_FILES, E2E_FILE),
        variables={
            "TIERING_CONFIG_FILE": str(config),
            "TIERING_METRICS_TOKEN_FILE": str(token),
            "AIRFLOW_API_PORT": str(free_port()),
            "KAFKA_BROKER_1_LOG_DIR": "kafka-1-logs",
            "KAFKA_BROKER_2_LOG_DIR": "kafka-2-logs",
            "KAFKA_LIBS": str(kafka_libs),
            "KAFKA_CLUSTER_ID": kafka_cluster_id,
            "KAFKA_1_PROPERTIES": str(work / "kafka-1.properties"),
            "KAFKA_2_PROPERTIES": str(work / "kafka-2.properties"),
        },
    )


def unpause(api: Api, dag_id: str) -> None:
    wait_for(f"{dag_id} parsed", lambda: api.has_dag(dag_id), 300, 2)
    api.ok("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})


def test_each_service_connects_to_its_own_database_as_its_own_role_none_a_superuser(deployment: Deployment) -> None:
    """The API server on Airflow's database and the metadata store, the default queue's worker on
    Celery's results and the metadata store, each as the role owning that database (no superuser),
    and neither let into another role's database; the worker has no URL of Airflow's database."""
    found = {
        service: json.loads(deployment.python(service, ROLES).strip().splitlines()[-1])
        for service in ("airflow-api-server", "airflow-worker")
    }
    assert found == {
        "airflow-api-server": {
            "metadata store": ["tiering", False],
            "metadata store elsewhere": "refused",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": ["airflow", False],
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN elsewhere": "refused",
        },
        "airflow-worker": {
            "metadata store": ["tiering", False],
            "metadata store elsewhere": "refused",
            "AIRFLOW__CELERY__RESULT_BACKEND": ["celery_results", False],
            "AIRFLOW__CELERY__RESULT_BACKEND elsewhere": "refused",
        },
    }


def test_the_stack_tiers_a_replicated_topic_end_to_end(deployment: Deployment) -> None:
    api, compose = deployment.api, deployment.compose
    deployment.s3_keys()  # the bucket, as the operator makes it once
    out = deployment.python("kafka-1", PRODUCE)
    say(f"produced {RECORDS} records to each of {TOPIC}-0 (leader 1) and {TOPIC}-1 (leader 2): {out.strip()}")
    closed = {0: deployment.closed_segments(1, 0), 1: deployment.closed_segments(2, 1)}
    assert all(len(bases) >= 10 for bases in closed.values()), closed

    # The copy DAG, killed mid-copy on broker 1's worker, converges after the retry. Unpausing it
    # starts a scheduled run besides the triggered one: whichever copies is the one killed. Each
    # broker's tasks run on its own worker (its queue); each partition is copied by its leader's.
    unpause(api, COPY_DAG)
    api.trigger(COPY_DAG)

    def broker_1_copying() -> dict[str, Any] | None:
        running = [ti for ti in deployment.task_instances(COPY_DAG, "~") if ti["task_id"] == "broker_1.copy"]
        running = [ti for ti in running if ti["state"] == "running"]
        if running and any(PARTITION_0_KEY.match(key) for key in deployment.s3_keys()):
            return running[0]
        return None

    killed = wait_for("broker 1's copy to upload its first segment", broker_1_copying, 600, 0.5)
    compose.run("kill", "-s", "SIGKILL", "airflow-worker-broker-1")
    say(f"killed airflow-worker-broker-1 in the middle of {killed['dag_run_id']}'s copy")
    compose.run("start", "airflow-worker-broker-1")

    def retried() -> dict[str, Any] | None:
        for ti in deployment.task_instances(COPY_DAG, killed["dag_run_id"]):
            same = (ti["task_id"], ti["map_index"]) == (killed["task_id"], killed["map_index"])
            if same and ti["state"] == "success":
                return ti
        return None

    retry = wait_for("the killed copy's retry", retried, 900, 2)
    say(f"the killed copy's retry (try {retry['try_number']}) succeeded")
    assert retry["try_number"] >= 2, retry  # the killed try, then the retry on the restarted worker
    remote: dict[int, list[int]] = {}

    def all_tiered() -> bool:
        remote.update({p: [s["start_offset"] for s in deployment.remote_segments(p)] for p in closed})
        return remote == closed

    wait_for(
        f"every closed segment of {TOPIC} in the remote tier (closed: {closed}, remote: {remote})", all_tiered, 600, 3
    )
    hosts = {n: deployment.container_hostname(f"airflow-worker-broker-{n}") for n in (1, 2)}
    for ti in deployment.task_instances(COPY_DAG, "~"):
        group = ti["task_id"].split(".")[0]
        if group.startswith("broker_") and ti["hostname"]:
            assert ti["hostname"] == hosts[int(group.removeprefix("broker_"))], ti

    say("every closed segment tiered, each broker's tasks on its own worker")

    # The Spark export DAG starts now, on the standalone master and worker containers, submitted
    # from the default queue's worker (no broker disk: it exports what the metadata store holds),
    # while the broker workers' retention and the checks below run. It holds the table's lease
    # only, no partition's.
    unpause(api, EXPORT_DAG)
    export_run = api.trigger(EXPORT_DAG, {"topic": TOPIC})

    # Retention runs (nothing breaches seven days: nothing is deleted).
    unpause(api, RETENTION_DAG)
    deployment.run(RETENTION_DAG)
    tiered = {p: deployment.remote_segments(p) for p in closed}
    assert {p: [s["start_offset"] for s in segments] for p, segments in tiered.items()} == closed
    say("retention ran and kept every segment")

    # Prometheus scrapes /tiering/metrics with the token (every minute: the stack has been up that
    # long by now); the Tiering page answers.
    def scraped() -> dict[str, Any] | None:
        out = deployment.python("airflow-api-server", http_get("http://prometheus:9090/api/v1/targets"))
        targets = json.loads(out.split("\n", 1)[1])["data"]["activeTargets"]
        up = [t for t in targets if t["labels"].get("job") == "kafka-tiering" and t["health"] == "up"]
        return up[0] if up else None

    assert wait_for("Prometheus' scrape of /tiering/metrics", scraped, 180, 3)
    anonymous = deployment.python("airflow-api-server", http_get("http://localhost:8080/tiering/metrics"))
    assert anonymous.split("\n", 1)[0] in ("401", "403"), anonymous[:200]
    code, page = api.call("GET", "/tiering/")
    assert code == 200 and "Tiering" in str(page), str(page)[:300]
    say("Prometheus scraped the metrics; the Tiering page answers")

    # The removal DAG refuses a live topic.
    unpause(api, REMOVAL_DAG)
    conf = {"topic": TOPIC, "partitions": [0, 1], "confirm": TOPIC, "dry_run": False}
    deployment.run(REMOVAL_DAG, conf, expect="failed")
    assert deployment.remote_segments(0)
    say("the removal DAG refused the live topic")
    deployment.python("kafka-1", DELETE_TOPIC)
    # The brokers' last observations still report the topic id until they are stale: the rule
    # (docs/kafka-rules.md section 7) is refused meanwhile; then the controller's word decides.
    deleted = time.monotonic()

    # Meanwhile the Spark verify and rebuild-indexes DAGs, submitted together as the export was:
    # each works on what the metadata store holds, the deleted topic's tier included. Verify reads
    # only, the rebuild (checking, repairing nothing) holds the partitions' leases: neither waits
    # for the other, only for the Spark worker's cores.
    for dag_id in (VERIFY_DAG, REBUILD_DAG):
        unpause(api, dag_id)
    verify_run = api.trigger(VERIFY_DAG, {"topic": TOPIC})
    rebuild_run = api.trigger(REBUILD_DAG, {"topic": TOPIC, "repair": False})
    deployment.finished(VERIFY_DAG, verify_run)
    say("the Spark verify DAG ran")

    # The export: the table holds each tiered record once, the one produced at its offset, in the
    # stack's warehouse.
    deployment.finished(EXPORT_DAG, export_run)
    exported = deployment.exported()
    for p, segments in tiered.items():
        first, last = segments[0]["start_offset"], segments[-1]["end_offset"]
        expected = {"rows": last - first + 1, "offsets": last - first + 1, "first": first, "last": last, "unlike": 0}
        assert {k: v for k, v in exported[p].items() if k != "location"} == expected, (p, exported[p])
        assert str(exported[p]["location"]).startswith(f"{WAREHOUSE}/"), exported[p]
    assert set(exported) == set(tiered), exported
    say(f"the Spark export DAG wrote every tiered record into the table once: {exported}")

    # The rebuild: every tiered segment's indexes rebuilt from its .log and found sound.
    deployment.finished(REBUILD_DAG, rebuild_run)
    segments = sum(len(found) for found in tiered.values())
    summary = f"rebuild-indexes: {len(tiered)} partition(s), {segments} segment(s): {segments} ok, 0 missing, "
    log = deployment.task_log(REBUILD_DAG, rebuild_run, "rebuild_indexes")
    assert summary + "0 differed, 0 repaired, 0 error;" in log, log[-3000:]
    say(f"the Spark rebuild-indexes DAG found the {segments} segments sound")

    master = deployment.python("airflow-api-server", http_get("http://spark-master:8080/json/"))
    status, body = master.split("\n", 1)
    assert status == "200", master
    apps = json.loads(body)["completedapps"]
    assert len(apps) >= 3 and all(app["state"] == "FINISHED" for app in apps), apps
    # ... authenticated with the env file's secret, which no process of theirs has on its command line
    secret = dict(line.split("=", 1) for line in compose.env_file.read_text().splitlines())["SPARK_AUTH_SECRET"]
    for service in ("spark-master", "spark-worker"):
        assert "SecurityManager: authentication enabled" in compose.run("logs", "--no-color", service).stdout, service
    for service in ("spark-master", "spark-worker", "airflow-worker"):
        assert secret not in compose.run("exec", "-T", service, "ps", "-eww", "-o", "args").stdout, service
    say("the Spark DAGs ran on the standalone cluster, authenticated")

    wait_for(
        "the brokers' observations of the topic to go stale",
        lambda: time.monotonic() - deleted > STALENESS_MS / 1000 + 2,
        60,
        1,
    )
    deployment.run(REMOVAL_DAG, conf)
    keys = deployment.s3_keys()
    assert not [key for key in keys if key.startswith(f"{TOPIC}-")]
    assert [key for key in keys if f"s3://{BUCKET}/{key}".startswith(f"{WAREHOUSE}/")]  # the export's files stay
    say("the removal DAG removed the deleted topic's tier, the exported table's files stayed")


def test_a_store_behind_the_image_is_refused_until_airflow_init_upgrades_it(deployment: Deployment) -> None:
    """No service migrates the metadata store on its own: left one revision behind the image (as a
    new image finds the store), the worker's commands are refused naming `tiering db upgrade`, and
    a run of ``airflow-init``, as ``up`` starts it, brings the store to the image's head."""
    compose = deployment.compose
    head = script_head()
    older = ScriptDirectory(str(MIGRATIONS)).get_revision(head).down_revision
    assert isinstance(older, str)

    def tiering(*args: str) -> subprocess.CompletedProcess[str]:
        return compose.run("exec", "-T", "airflow-worker", "tiering", *args, check=False, timeout=300)

    def revision() -> str:
        current = tiering("--json", "db", "current")
        assert current.returncode == 0, current.stderr
        return str(json.loads(current.stdout)["revision"])

    assert revision() == head
    downgraded = tiering("db", "downgrade", older)
    assert downgraded.returncode == 0, downgraded.stderr
    refused = tiering("--json", "status", "--cluster")
    assert refused.returncode == 1, refused.stdout
    assert f"schema revision {older}, behind this version of the platform (head {head})" in refused.stderr
    assert "run `tiering db upgrade`" in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    assert revision() == older  # the refusal changed nothing
    say(f"the store at {older} is refused by the worker's commands")
    compose.run("run", "--rm", "--no-deps", "-T", "airflow-init", timeout=900)
    assert revision() == head
    served = tiering("--json", "status", "--cluster")
    assert served.returncode == 0 and "schema revision" not in served.stderr, served.stderr
    say(f"airflow-init upgraded the store to {head}; the worker's commands are served again")
