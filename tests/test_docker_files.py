"""The docker/ stack files are well-formed and agree with the config contract; the image runs as an
unprivileged user with runtime dependencies only, and no credential is written in any file. The
stack can run: the workers reach the API server's Task Execution API and share its JWT secret, a
worker consumes every queue a DAG uses, each secret reaches only the services that use it, and
docker-compose reads the files (with the override that builds every image from Debian's packages).
``tests/deploy/test_stack.py`` starts the stack itself."""

from __future__ import annotations

import configparser
import fnmatch
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from tests.conftest import unavailable
from tiering_core.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DEBIAN_OVERRIDE = DOCKER / "debian" / "docker-compose.yml"
DEV_TOOLS = ("moto", "pytest", "ruff", "mypy", "types-", "boto3-stubs")
INTERPOLATED = re.compile(r"\$\{[A-Z][A-Z0-9_]*(:\?[^}]*)?\}")
#: A variable the env file must set: no default, docker-compose stops with the message when unset.
REQUIRED = re.compile(r"\$\{([A-Z][A-Z0-9_]*):\?[^}]*\}")
VARIABLE = re.compile(r"\$\{([A-Z][A-Z0-9_]*)")
#: A volume: its source (a path, a named volume or an interpolation with a default), target, mode.
VOLUME = re.compile(r"(\$\{[^}]*\}|[^:]+):([^:]+)(?::([a-z,]+))?")


def compose(path: Path = DOCKER / "docker-compose.yml") -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


def command_of(service: dict[str, Any]) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else str(command)


def airflow_services(services: dict[str, Any]) -> set[str]:
    """The services that run an Airflow component (the init job among them)."""
    return {name for name, s in services.items() if re.search(r"(^|[\s;&])airflow ", command_of(s))}


def celery_workers(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if command_of(s).startswith("airflow celery worker")}


def queues_of(worker: dict[str, Any]) -> set[str]:
    """The queues a Celery worker consumes (``--queues a,b``)."""
    (queues,) = re.findall(r"--queues[ =](\S+)", command_of(worker))
    return set(queues.split(","))


def variables_of(service: dict[str, Any]) -> set[str]:
    """The variables a service's environment interpolates."""
    return {v for value in (service.get("environment") or {}).values() for v in VARIABLE.findall(str(value))}


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    mode: str


def mounts(service: dict[str, Any]) -> list[Mount]:
    """A service's volumes (``source:target[:mode]``; a source may be ``${VAR:-default}``)."""
    found = []
    for volume in service.get("volumes", []):
        match = VOLUME.fullmatch(volume)
        assert match, volume
        found.append(Mount(match.group(1), match.group(2), match.group(3) or "rw"))
    return found


def dockerignored(path: str, ignore: Path = ROOT / ".dockerignore") -> bool:
    """Whether the image build's context leaves ``path`` out: Docker's rules, the last matching
    pattern wins, ``!`` takes a path back in, a pattern that matches a directory matches all in it."""

    def matches(pattern: list[str], parts: list[str]) -> bool:
        if not pattern:
            return not parts
        if pattern[0] == "**":
            return any(matches(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
        return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and matches(pattern[1:], parts[1:])

    parts = path.split("/")
    ignored = False
    for line in ignore.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/").split("/")
        if any(matches(pattern, parts[:i]) for i in range(1, len(parts) + 1)):
            ignored = not negated
    return ignored


def test_compose_and_config_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    assert {"postgres", "minio", "airflow-api-server", "airflow-scheduler", "spark-master"} <= set(compose["services"])
    config = parse_config(yaml.safe_load((DOCKER / "tiering.yaml").read_text()))
    assert config.remote.endpoint_url == "http://minio:9000"
    assert "constraints.txt" in (DOCKER / "Dockerfile").read_text()
    assert make_url(config.metadata.url).password == "from-the-env-file"


def test_the_image_runs_as_an_unprivileged_user() -> None:
    users = re.findall(r"^USER\s+(\S+)", (DOCKER / "Dockerfile").read_text(), re.MULTILINE)
    assert users and users[-1] not in ("root", "0", "0:0")


def test_the_image_installs_runtime_dependencies_only() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert "requirements.txt" not in dockerfile  # it lists the test and lint tools too
    assert not any(tool in dockerfile for tool in DEV_TOOLS)
    (extras,) = re.findall(r"\"\.\[([a-z,]+)\]\"", dockerfile)
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    declared = setup["options"]["install_requires"].split()
    for extra in extras.split(","):
        declared += setup["options.extras_require"][extra].split()
    assert "psycopg[binary]" in declared and "apache-airflow>=3.3" in declared
    assert not [requirement for requirement in declared if requirement.startswith(DEV_TOOLS)]


def _secrets(key: str, value: str) -> list[str]:
    """The credentials an environment entry of the compose file carries."""
    if re.search(r"PASSWORD|SECRET|TOKEN|_KEY$|_USER$", key) and key != "POSTGRES_USER":
        return [value]
    found = []
    if value.startswith("{"):
        conn = json.loads(value)
        found += [conn[field] for field in ("login", "password") if field in conn]
    elif "://" in value:
        url = make_url(value.replace("${", "").replace(":?", "").replace("}", ""))
        if url.password is not None:
            found.append(re.search(r"://[^:/]+:([^@]+)@", value).group(1))  # type: ignore[union-attr]
    return found


def test_no_credential_is_written_in_the_files_they_come_from_the_env_file() -> None:
    compose_text = (DOCKER / "docker-compose.yml").read_text()
    compose = yaml.safe_load(compose_text)
    checked = 0
    for service in compose["services"].values():
        for key, value in (service.get("environment") or {}).items():
            for secret in _secrets(key, str(value)):
                assert INTERPOLATED.fullmatch(secret), (key, secret)
                checked += 1
    assert checked >= 6  # postgres, minio, and the Airflow services' database and aws connection
    assert "write docker/tiering.env" in compose_text  # what docker-compose says of a missing value
    assert make_url(yaml.safe_load((DOCKER / "tiering.yaml").read_text())["metadata"]["url"]).password is None
    assert "docker/tiering.env" in (ROOT / ".gitignore").read_text().splitlines()
    assert dockerignored("docker/tiering.env") and not dockerignored("tiering_core/config.py")
    assert "--env-file docker/tiering.env" in (ROOT / "docs/deployment.md").read_text()


def test_one_celery_worker_per_broker_reads_only_its_broker_s_log_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack is a cluster deployment: the CeleryExecutor with Redis, and for each broker of the
    sample config one worker that consumes only that broker's queue, names the broker and mounts
    only its log dirs, read-only; no other service mounts a broker's disk."""
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    config = parse_config(yaml.safe_load((DOCKER / "tiering.yaml").read_text()))
    assert config.brokers and len(config.brokers) >= 2
    services = compose()["services"]
    assert "redis" in services
    assert "requirepass" in " ".join(services["redis"]["command"])  # Celery's queue is not open to all
    workers = celery_workers(services)
    for name in airflow_services(services):
        assert services[name]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
    for name in {"airflow-scheduler", *workers}:  # who puts tasks on Celery's queues and who takes them
        broker_url = services[name]["environment"]["AIRFLOW__CELERY__BROKER_URL"]
        assert broker_url.startswith("redis://") and "@redis:6379/" in broker_url, name
    all_broker_dirs = {str(d) for b in config.brokers.values() for d in b.log_dirs}
    all_broker_queues = {b.queue for b in config.brokers.values()}

    broker_workers = {name: s for name, s in workers.items() if "TIERING_BROKER_ID" in s["environment"]}
    assert len(broker_workers) == len(config.brokers)
    served = set()
    for name, service in broker_workers.items():
        broker_id = int(service["environment"]["TIERING_BROKER_ID"])
        broker = config.brokers[broker_id]
        assert queues_of(service) == {broker.queue}, name  # its broker's queue only
        mounted = {m.target: m.mode for m in mounts(service)}
        assert {str(d) for d in broker.log_dirs} <= set(mounted), name
        assert all(mounted[str(d)] == "ro" for d in broker.log_dirs), name
        assert not (set(mounted) & all_broker_dirs) - {str(d) for d in broker.log_dirs}, name  # no other broker's
        served.add(broker_id)
    assert served == set(config.brokers)
    for name, worker in workers.items():
        if name not in broker_workers:  # the default queue's worker: no broker's queue
            assert not queues_of(worker) & all_broker_queues, name
    for name, service in services.items():
        if name not in broker_workers:  # scheduler, API server, the default queue's worker, Spark: no broker disk
            assert not {m.target for m in mounts(service)} & all_broker_dirs, name


def test_no_secret_is_on_a_command_line() -> None:
    """Secrets reach a service through its environment, never its argv (``ps`` shows argv to
    every user of the host): Redis reads its password as config on standard input."""
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        command = service.get("command", "")
        command = " ".join(command) if isinstance(command, list) else str(command)
        assert not re.search(r"\$\{?[A-Z_]*(PASSWORD|SECRET|TOKEN)", command.replace("$$", "")), name
    assert "REDIS_PASSWORD" in compose["services"]["redis"]["environment"]


# --- PostgreSQL: each database its own role, the superuser for the postgres service alone -------

INITDB = DOCKER / "postgres" / "initdb"


@dataclass(frozen=True)
class Roles:
    """What docker/postgres/initdb makes: each role with the variable its password is read from, and
    each database with its owner."""

    passwords: dict[str, str]
    owners: dict[str, str]
    text: str


def initdb_roles() -> Roles:
    (script,) = INITDB.iterdir()
    text = script.read_text()
    assert script.suffix == ".sh", script  # the official image sources it, docker/debian's likewise
    psql_variables = dict(re.findall(r"^\\getenv (\w+) (\w+)$", text, re.MULTILINE))
    passwords = {
        role: psql_variables[variable]
        for role, variable in re.findall(r"^CREATE ROLE (\w+) LOGIN PASSWORD :'(\w+)';$", text, re.MULTILINE)
    }
    owners = dict(re.findall(r"^CREATE DATABASE (\w+) OWNER (\w+);$", text, re.MULTILINE))
    assert len(passwords) == len(re.findall(r"CREATE ROLE", text)), text  # no other attribute on any role
    assert len(owners) == len(re.findall(r"CREATE DATABASE", text)), text
    return Roles(passwords, owners, text)


def database_urls() -> dict[str, tuple[str, str]]:
    """Every PostgreSQL URL the stack connects with, by who connects, each without its password and
    with the env file's variable the password comes from: the compose file's, tiering.yaml's
    metadata store in each service that sets the variable its ``metadata.password_env`` names, and
    its export catalog in each service that sets ``PGPASSWORD`` (what PostgreSQL's client reads)."""
    services = compose()["services"]
    found = {}
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            if "postgresql" in str(value):
                (variable,) = REQUIRED.findall(str(value))
                found[f"{name}: {key}"] = (REQUIRED.sub("", str(value)).removeprefix("db+"), variable)
    config = yaml.safe_load((DOCKER / "tiering.yaml").read_text())
    metadata, catalog = config["metadata"], config["export"]["catalog"]
    for name, service in services.items():
        environment = service.get("environment") or {}
        value = environment.get(metadata["password_env"])
        if value is not None and name != "postgres":
            (variable,) = REQUIRED.findall(str(value))
            found[f"{name}: tiering.yaml's metadata.url"] = (metadata["url"], variable)
        if "PGPASSWORD" in environment:
            (variable,) = REQUIRED.findall(str(environment["PGPASSWORD"]))
            found[f"{name}: tiering.yaml's export.catalog.uri"] = (catalog["uri"], variable)
    return found


def test_each_database_has_a_role_of_its_own_and_no_service_connects_as_the_superuser() -> None:
    """Airflow's database, Celery's results, the metadata store and the export's Iceberg catalog each
    belong to a login role of their own (no superuser, none of them allowed to connect to another's
    database), with a password from the env file; every URL of the stack names the owner of its
    database, with that owner's password; PostgreSQL's superuser password is in the postgres service
    alone."""
    roles = initdb_roles()
    assert set(roles.owners) == {"airflow", "celery_results", "tiering", "iceberg"}
    assert set(roles.owners.values()) == set(roles.passwords)  # each role owns a database
    assert len(set(roles.owners.values())) == len(roles.owners)  # ... and only one
    (revoked,) = re.findall(r"^REVOKE ALL ON DATABASE ([\w, ]+) FROM PUBLIC;$", roles.text, re.MULTILINE)
    assert set(revoked.split(", ")) == set(roles.owners)
    for variable in roles.passwords.values():  # the script stops when one is missing
        assert f': "${{{variable}:?{variable} is not set}}"' in roles.text, variable
    services = compose()["services"]
    postgres = services["postgres"]["environment"]
    assert "POSTGRES_USER" not in postgres  # the superuser is postgres, none of the roles
    assert set(postgres) == {"POSTGRES_PASSWORD", *roles.passwords.values()}
    for variable in postgres:
        assert postgres[variable] == f"${{{variable}:?write docker/tiering.env}}", variable
    assert {name for name, s in services.items() if "POSTGRES_PASSWORD" in variables_of(s)} == {"postgres"}

    urls = database_urls()
    assert "airflow-worker: tiering.yaml's metadata.url" in urls and "airflow-init: tiering.yaml's metadata.url" in urls
    assert {where for where in urls if "export.catalog" in where} == {
        "airflow-worker: tiering.yaml's export.catalog.uri",
        "airflow-api-server: tiering.yaml's export.catalog.uri",
    }
    for where, (text, variable) in urls.items():
        url = make_url(text)
        assert url.host == "postgres" and url.database in roles.owners, where
        owner = roles.owners[url.database]
        assert url.username == owner and variable == roles.passwords[owner], where
    assert {make_url(text).database for text, _ in urls.values()} == set(roles.owners)


# --- the stack runs: what Airflow 3's own compose file has --------------------------------------


def airflow_secret_holders(services: dict[str, Any]) -> dict[str, set[str]]:
    """Airflow's settings that hold a secret, each with the components that use it, by what Airflow
    3 has them do. Airflow's database, and the Fernet key of the connections, variables and
    triggers' arguments stored in it: every component but the Celery workers, whose tasks reach it
    only through the Task Execution API. The JWT secret: the scheduler, whose executor signs each
    task's token, and the API server, which checks and renews them (the dag-processor and the
    triggerer call that API in-process, where no token is checked; a worker only presents the
    token it is given). ``[api] secret_key``: the API server, which signs its requests for task
    logs with it, and the log servers that check them, the Celery workers' and the triggerer's.
    Celery's broker and result backend: the scheduler and the workers."""
    workers = set(celery_workers(services))
    on_the_database = airflow_services(services) - workers
    return {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": on_the_database,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": on_the_database,
        "AIRFLOW__CORE__FERNET_KEY": on_the_database,
        "AIRFLOW__API_AUTH__JWT_SECRET": {"airflow-api-server", "airflow-scheduler"},
        "AIRFLOW__API__SECRET_KEY": {"airflow-api-server", "airflow-triggerer", *workers},
        "AIRFLOW__CELERY__BROKER_URL": {"airflow-scheduler", *workers},
        "AIRFLOW__CELERY__RESULT_BACKEND": {"airflow-scheduler", *workers},
    }


def test_every_airflow_service_reaches_the_execution_api_on_the_api_server() -> None:
    """A Celery worker runs each task through the Task Execution API; left unset, the URL is
    ``http://localhost:8080/execution/``: the worker's own container."""
    services = compose()["services"]
    (api_server,) = [name for name, s in services.items() if command_of(s) == "airflow api-server"]
    (port,) = [str(p).rsplit(":", 1)[-1] for p in services[api_server]["ports"]]
    for name in airflow_services(services):
        url = urlsplit(services[name]["environment"].get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", ""))
        assert (url.scheme, url.hostname, url.port, url.path) == ("http", api_server, int(port), "/execution/"), name


def test_each_airflow_secret_reaches_exactly_the_components_that_use_it_all_with_one_value() -> None:
    """The JWT secret where tokens are signed and checked, the log servers' key where log requests are
    signed and checked, Airflow's database where it is used: no component more, and the same value
    from the env file everywhere (a component left without it would make its own, and its tokens or
    log requests be refused)."""
    services = compose()["services"]
    names = airflow_services(services)
    assert {"airflow-init", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor"} <= names
    assert {"airflow-triggerer", *celery_workers(services)} <= names
    for key, holders in airflow_secret_holders(services).items():
        assert {name for name, s in services.items() if key in (s.get("environment") or {})} == holders, key
        values = {services[name]["environment"][key] for name in holders}
        assert len(values) == 1, (key, values)
        (value,) = values
        assert REQUIRED.search(value), (key, value)  # no default, no value in the file
        if key.endswith(("_SECRET", "_KEY")):
            assert REQUIRED.fullmatch(value), (key, value)


@pytest.fixture(scope="session")
def airflow_for_parsing() -> Iterator[None]:
    """Airflow configured to parse DAGs (no metadata database); its temporary home goes at the end."""
    from tests.airflow_support import configure_airflow, remove_airflow_home

    configure_airflow()
    yield
    remove_airflow_home()


@pytest.mark.usefixtures("airflow_for_parsing")
def test_every_queue_a_dag_puts_a_task_on_is_consumed_by_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DAGs of dags/, parsed with the stack's own config (two brokers): each broker's tasks go to
    its queue, the removal, delete-records, export and Spark DAGs' to the default queue; a task on a
    queue no worker consumes stays queued for ever."""
    from tests.dags.test_tiering_dags import dagbag

    monkeypatch.setenv("TIERING_CONFIG", str(DOCKER / "tiering.yaml"))
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    monkeypatch.delenv("TIERING_SENSOR_DEFERRABLE", raising=False)
    bag = dagbag()
    assert bag.import_errors == {}
    queues: dict[str, list[str]] = {}
    for dag_id, dag in bag.dags.items():
        for task in dag.tasks:
            queues.setdefault(task.queue, []).append(f"{dag_id}.{task.task_id}")
    assert {"default", "tiering-broker-1", "tiering-broker-2"} <= set(queues)  # the walk sees both kinds
    consumed = {queue for worker in celery_workers(compose()["services"]).values() for queue in queues_of(worker)}
    assert {queue: tasks for queue, tasks in queues.items() if queue not in consumed} == {}


def test_the_scrapers_token_reaches_only_the_api_server_and_prometheus_which_reads_it_as_group_50000(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The token file is owned by group 50000 and readable by that group only (docs/deployment.md, "Docker"): the
    platform's user (uid 50000, its own group) and Prometheus, which joins that group; no other
    service mounts it."""
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    services = compose()["services"]
    config = parse_config(yaml.safe_load((DOCKER / "tiering.yaml").read_text()))
    (token,) = [m for m in mounts(services["airflow-api-server"]) if m.target == str(config.metrics.bearer_token_file)]
    holders = {name: m for name, s in services.items() for m in mounts(s) if m.source == token.source}
    assert set(holders) == {"airflow-api-server", "prometheus"}
    assert all(m.mode == "ro" for m in holders.values())
    assert "50000" in [str(group) for group in services["prometheus"].get("group_add", [])]
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert re.search(r"groupadd .*--gid 50000 tiering", dockerfile)
    assert re.search(r"useradd .*--uid 50000 --gid 50000 tiering", dockerfile)


def test_only_services_with_their_own_login_are_published() -> None:
    """Prometheus has no authentication: it is reached through Grafana or ``docker-compose exec``.
    Neither is the S3 endpoint published: the workers reach it on the stack's network."""
    services = compose()["services"]
    published = {name for name, s in services.items() if s.get("ports") or s.get("network_mode") == "host"}
    assert published == {"airflow-api-server", "grafana"}


def test_minio_s_root_credentials_stay_in_the_minio_service() -> None:
    services = compose()["services"]
    for name, service in services.items():
        if name != "minio":
            assert "MINIO_ROOT_" not in json.dumps(service), name


def test_the_platform_s3_credentials_are_its_own_and_only_the_workers_hold_them() -> None:
    """The aws connection's login and password are variables of their own (a user made in MinIO for
    the platform, docs/deployment.md, "Docker"), never MinIO's root credentials; only the workers, which run the
    tasks that read and write the bucket, get them."""
    services = compose()["services"]
    holders = {name for name, s in services.items() if "AIRFLOW_CONN_AWS_DEFAULT" in (s.get("environment") or {})}
    assert holders == set(celery_workers(services))
    (connection,) = {services[name]["environment"]["AIRFLOW_CONN_AWS_DEFAULT"] for name in holders}
    conn = json.loads(connection)
    login, password = (REQUIRED.fullmatch(conn[field]) for field in ("login", "password"))
    assert login and password and login.group(1) != password.group(1), conn
    assert {login.group(1), password.group(1)}.isdisjoint(variables_of(services["minio"]))


def spark_services(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if "spark-class" in command_of(s)}


def test_the_spark_services_get_only_spark_s_secret() -> None:
    """The Spark master and worker run the platform's image but hold none of its secrets (the driver,
    on the default queue's worker, holds them): only the secret Spark's processes authenticate each
    other with."""
    services = compose()["services"]
    spark = spark_services(services)
    assert set(spark) == {"spark-master", "spark-worker"}
    for name, service in spark.items():
        assert variables_of(service) == {"SPARK_AUTH_SECRET"}, name
        assert service["environment"]["SPARK_AUTH_SECRET"] == "${SPARK_AUTH_SECRET:?write docker/tiering.env}"
        assert not [m for m in mounts(service) if "metrics-token" in m.source], name


@pytest.mark.usefixtures("airflow_for_parsing")
def test_spark_s_secret_and_master_reach_only_the_workers_whose_tasks_submit_spark_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The workers consuming the queues of the Spark DAGs' spark-submit tasks, found by parsing
    dags/ with the stack's config, are the only Airflow services with Spark's secret and the
    ``spark_default`` connection to the standalone master."""
    from tests.dags.test_tiering_dags import dagbag
    from tiering_airflow.operators.spark import TieringSparkSubmitOperator

    monkeypatch.setenv("TIERING_CONFIG", str(DOCKER / "tiering.yaml"))
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    bag = dagbag()
    assert bag.import_errors == {}
    queues = {t.queue for dag in bag.dags.values() for t in dag.tasks if isinstance(t, TieringSparkSubmitOperator)}
    assert queues
    services = compose()["services"]
    submitting = {name for name, worker in celery_workers(services).items() if queues_of(worker) & queues}
    assert submitting == {"airflow-worker"}
    holders = {name for name, s in services.items() if "SPARK_AUTH_SECRET" in variables_of(s)}
    assert holders == set(spark_services(services)) | submitting
    connection = {name for name, s in services.items() if "AIRFLOW_CONN_SPARK_DEFAULT" in (s.get("environment") or {})}
    assert connection == submitting
    assert {services[name]["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"] for name in connection} == {
        "spark://spark-master:7077"
    }


def run_entry_point(tmp_path: Path, secret: str | None) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The image's entry point (as its ENTRYPOINT runs it) with ``secret`` as SPARK_AUTH_SECRET and a
    command that prints its arguments and environment."""
    conf_dir = tmp_path / "spark-conf"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SPARK_CONF_DIR": str(conf_dir)}
    if secret is not None:
        env["SPARK_AUTH_SECRET"] = secret
    command = ["sh", str(DOCKER / "entrypoint.sh"), "sh", "-c", 'echo "$0 $1"; env', "first", "second"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc, conf_dir / "spark-defaults.conf"


def test_the_image_entry_point_gives_spark_its_secret_in_a_file_only_the_user_reads(tmp_path: Path) -> None:
    """With SPARK_AUTH_SECRET, the entry point writes spark-defaults.conf (mode 0600) switching on
    Spark's authentication with that secret and its network encryption, then runs the command
    without the variable; without it, it writes nothing. The image runs it as its ENTRYPOINT, with
    SPARK_CONF_DIR in the home of its user, and the build context holds it."""
    secret = "0123456789abcdef" * 4
    proc, conf = run_entry_point(tmp_path, secret)
    assert proc.stdout.splitlines()[0] == "first second"  # the command, its arguments as given
    assert "SPARK_AUTH_SECRET" not in proc.stdout and secret not in proc.stdout
    assert conf.stat().st_mode & 0o777 == 0o600
    properties = dict(line.split(" ", 1) for line in conf.read_text().splitlines())
    assert properties == {
        "spark.authenticate": "true",
        "spark.authenticate.secret": secret,
        "spark.network.crypto.enabled": "true",
    }
    proc, conf = run_entry_point(tmp_path / "none", None)
    assert proc.stdout.splitlines()[0] == "first second" and not conf.exists()

    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert "COPY docker/entrypoint.sh /usr/local/bin/tiering-entrypoint\n" in dockerfile
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.*)$", dockerfile, re.MULTILINE)
    assert json.loads(entrypoint) == ["/bin/sh", "/usr/local/bin/tiering-entrypoint"]
    assert re.search(r"^\s+SPARK_CONF_DIR=/opt/airflow/spark-conf$", dockerfile, re.MULTILINE)  # the user's home
    assert not dockerignored("docker/entrypoint.sh")


def test_docker_compose_reads_the_stack_and_the_debian_override(tmp_path: Path) -> None:
    """``docker-compose config`` (Debian's 1.29, the oldest docs/deployment.md names) reads the stack alone
    and with docker/debian/'s override, which builds every image production pulls (Grafana aside)
    from a Debian base instead."""
    from tests.deploy.stack import fresh_env_file

    binary = shutil.which("docker-compose")
    if binary is None:
        unavailable("docker-compose", "not installed (Debian's docker-compose package)")
    env_file = tmp_path / "tiering.env"
    values = fresh_env_file(env_file)

    def config(*files: Path) -> dict[str, Any]:
        paths = [part for path in files for part in ("-f", str(path))]
        proc = subprocess.run(
            [binary, "--env-file", str(env_file), *paths, "config"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)},  # no secret of ours
        )
        assert proc.returncode == 0, proc.stderr
        return dict(yaml.safe_load(proc.stdout))

    main = config(DOCKER / "docker-compose.yml")["services"]
    debian = config(DOCKER / "docker-compose.yml", DEBIAN_OVERRIDE)["services"]
    assert set(debian) == set(main)
    assert main["minio"]["environment"]["MINIO_ROOT_PASSWORD"] == values["MINIO_ROOT_PASSWORD"]  # the env file's
    platform = main["airflow-init"]["image"]
    pulled = {name for name, s in main.items() if "build" not in s and s["image"] != platform}
    assert pulled == {"postgres", "redis", "minio", "prometheus", "grafana"}
    built = {name: s["build"] for name, s in debian.items() if "build" in s}
    assert set(built) == {"airflow-init"} | pulled - {"grafana"}
    for name, build in built.items():
        assert Path(build["context"]) == ROOT and (ROOT / build["dockerfile"]).is_file(), name
        assert build["args"]["BASE_IMAGE"] == "tiering-debian:bookworm", name
        if name in pulled:
            assert debian[name]["image"] != main[name]["image"], name  # never shadows the official image
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim-bookworm$", (DOCKER / "Dockerfile").read_text(), re.MULTILINE)


# --- docs/deployment.md, "Docker", says how to start it -------------------------------------------

#: The compose files' command prefix in the recipes of docs/deployment.md.
COMPOSE_COMMAND = "docker-compose --env-file docker/tiering.env -f docker/docker-compose.yml"


def docker_section() -> str:
    return (ROOT / "docs/deployment.md").read_text().split("\n## Docker\n", 1)[1].split("\n## ", 1)[0]


def test_the_docs_env_file_recipe_sets_every_variable_the_stack_requires() -> None:
    """The env file of the recipe of docs/deployment.md is the one the deployment test writes, and sets exactly the
    variables docker-compose stops without; the Fernet key in the URL-safe base64 Airflow reads."""
    from tests.deploy.stack import ENV_KEYS

    section = docker_section()
    recipe = section.split("cat > docker/tiering.env <<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    lines = dict(line.split("=", 1) for line in recipe.splitlines())
    required = set(REQUIRED.findall((DOCKER / "docker-compose.yml").read_text()))
    assert set(lines) == required == set(ENV_KEYS)
    assert lines["AIRFLOW_FERNET_KEY"] == "$(openssl rand -base64 32 | tr '+/' '-_')"
    assert "openssl rand -hex 32 > docker/metrics-token\n" in section
    assert "chgrp 50000 docker/metrics-token && chmod 0440 docker/metrics-token\n" in section


def test_the_docs_start_commands_are_the_compose_files_and_name_every_service_but_grafana() -> None:
    section = docker_section()
    debian = f"{COMPOSE_COMMAND} -f docker/debian/docker-compose.yml"
    for command in (f"{COMPOSE_COMMAND} build", f"{COMPOSE_COMMAND} up -d\n", f"{debian} build\n"):
        assert command in section, command
    assert f"{COMPOSE_COMMAND} exec airflow-api-server cat /opt/airflow/simple_auth_manager_passwords" in section
    assert "tar -C DIR -c . | docker import - tiering-debian:bookworm" in section
    (started,) = re.findall(re.escape(f"{debian} up -d ") + r"(.*)", section)
    assert sorted(started.split()) == sorted(set(compose()["services"]) - {"grafana"})
    assert "The test `tests/deploy/test_stack.py` starts this\nstack on a real Docker engine" in section


def test_the_docs_table_of_secrets_is_the_compose_file_s() -> None:
    """Each secret of the env file (and the token file) reaches exactly the services the table of
    docs/deployment.md names for it."""
    from tests.deploy.stack import ENV_KEYS

    services = compose()["services"]
    groups = {"every Airflow service": airflow_services(services), "every Celery worker": set(celery_workers(services))}
    (token,) = [m.source for m in mounts(services["prometheus"]) if "token" in m.target]
    actual: dict[str, set[str]] = {"docker/metrics-token": set()}
    for name, service in services.items():
        for variable in variables_of(service) & set(ENV_KEYS):
            actual.setdefault(variable, set()).add(name)
        if token in {m.source for m in mounts(service)}:
            actual["docker/metrics-token"].add(name)
    table = docker_section().split("| Secret | Services that get it |\n| --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    documented: dict[str, set[str]] = {}
    for row in table.splitlines():
        secrets, holders = row.strip("|").split("|")
        named = set(re.findall(r"`([\w-]+)`", re.sub(r"\(.*?\)", "", holders)))
        named |= {service for group, members in groups.items() if group in holders for service in members}
        for secret in re.findall(r"`([\w/.-]+)`", secrets):
            documented[secret] = named
    assert documented == actual
    assert set(documented) == {*ENV_KEYS, "docker/metrics-token"}


# --- the image has what the config can enable ----------------------------------------------------

#: The packages the image ships (the project's own, found by their imports of each other).
SHIPPED = ("tiering_core", "plugins/tiering_airflow", "spark_apps", "dags")
FIRST_PARTY = frozenset({"tiering_core", "tiering_airflow", "spark_apps"})
#: The embedded demo starts moto's S3 server: a development tool (DEV_TOOLS) the image leaves out.
DEMO = ROOT / "tiering_core" / "cli" / "demo.py"


def _imports() -> dict[str, set[Path]]:
    """Every top-level module the shipped code imports, at any depth (the optional ones are imported
    inside the functions that need them), with the files that import it."""
    import ast
    import sys

    found: dict[str, set[Path]] = {}
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in FIRST_PARTY and top != "__future__":
                        found.setdefault(top, set()).add(path)
    return found


def _image_extras() -> list[str]:
    (extras,) = re.findall(r"\"\.\[([a-z,]+)\]\"", (DOCKER / "Dockerfile").read_text())
    return extras.split(",")


def _setup() -> configparser.ConfigParser:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    return setup


def _installed_by(requirements: list[str]) -> set[str]:
    """The distributions ``pip install`` of ``requirements`` brings, by their installed metadata in
    this environment (the same pins as the image's: constraints.txt), with every extra's."""
    import importlib.metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[str] = set()
    seen: set[tuple[str, str]] = set()
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        found.add(name)
        try:
            needs = importlib.metadata.distribution(requirement.name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for extra in {"", *requirement.extras}:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for text in needs:
                need = Requirement(text)
                if need.marker is None or need.marker.evaluate({"extra": extra}):
                    pending.append(need)
    return found


def test_the_image_installs_every_extra_and_every_package_the_code_can_import() -> None:
    """Whatever the config enables (``kafka:``, ``export:``, a PostgreSQL URL, ...) imports a package
    the image has: every module the shipped code imports, found by reading the code, comes from a
    distribution the image's install brings, and so do the database drivers the docs name."""
    import importlib.metadata

    from packaging.utils import canonicalize_name

    setup = _setup()
    extras = _image_extras()
    assert sorted(extras) == sorted(setup["options.extras_require"])  # one install: every extra
    requirements = setup["options"]["install_requires"].split()
    for extra in extras:
        requirements += setup["options.extras_require"][extra].split()
    image = _installed_by(requirements)
    providers = importlib.metadata.packages_distributions()
    imports = _imports()
    assert {"kafka", "pyiceberg", "pyarrow", "boto3", "airflow", "pyspark"} <= set(imports)  # the walk sees them
    missing = {}
    for module, files in sorted(imports.items()):
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        assert dists, f"{module} (imported by {sorted(map(str, files))}) is no installed distribution's"
        if dists & image:
            continue
        if all(f.is_relative_to(DEMO) for f in files) and all(d.startswith(DEV_TOOLS) for d in dists):
            continue  # the demo's own S3 server
        missing[module] = sorted(str(f.relative_to(ROOT)) for f in files)
    assert missing == {}, f"imported, but the image's install does not bring them: {missing}"

    docs = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    schemes = set(re.findall(r"\b(postgresql\+[a-z0-9]+)://", docs))
    assert "postgresql+psycopg" in schemes
    for scheme in schemes:
        driver = make_url(f"{scheme}://u@h/db").get_dialect().import_dbapi().__name__.split(".")[0]
        assert {canonicalize_name(d) for d in providers.get(driver, [])} & image, (scheme, driver)
