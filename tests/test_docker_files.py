"""The docker/ stack files are well-formed and agree with the config contract; the image runs as an
unprivileged user with runtime dependencies only, and no credential is written in any file."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from tiering_core.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DEV_TOOLS = ("moto", "pytest", "ruff", "mypy", "types-", "boto3-stubs")
INTERPOLATED = re.compile(r"\$\{[A-Z_]+(:\?[^}]*)?\}")


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
    if re.search(r"PASSWORD|SECRET|_USER$", key) and key != "POSTGRES_USER":
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
    assert "--env-file docker/tiering.env" in compose_text
    assert make_url(yaml.safe_load((DOCKER / "tiering.yaml").read_text())["metadata"]["url"]).password is None
    for ignore in (".gitignore", ".dockerignore"):
        assert "docker/tiering.env" in (ROOT / ignore).read_text().splitlines()
    assert "docker/tiering.env" in (ROOT / "README.md").read_text()


def test_one_celery_worker_per_broker_reads_only_its_broker_s_log_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack is a cluster deployment: the CeleryExecutor with Redis, and for each broker of the
    sample config one worker that consumes only that broker's queue, names the broker and mounts
    only its log dirs, read-only; no other service mounts a broker's disk."""
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    config = parse_config(yaml.safe_load((DOCKER / "tiering.yaml").read_text()))
    assert config.brokers and len(config.brokers) >= 2
    services = compose["services"]
    assert "redis" in services
    assert "requirepass" in " ".join(services["redis"]["command"])  # Celery's queue is not open to all
    for name in ("airflow-api-server", "airflow-scheduler"):
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        assert (
            env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
            and "@redis:6379/" in env["AIRFLOW__CELERY__BROKER_URL"]
        )
    all_broker_dirs = {str(d) for b in config.brokers.values() for d in b.log_dirs}

    def mounts(service: dict) -> dict[str, str]:
        """Container path -> mode of each volume."""
        found = {}
        for volume in service.get("volumes", []):
            _source, target, *mode = re.sub(r"\$\{[^}]*\}", "source", volume).split(":")
            found[target] = mode[0] if mode else "rw"
        return found

    workers = {name: s for name, s in services.items() if str(s.get("command", "")).startswith("airflow celery worker")}
    assert len(workers) == len(config.brokers)
    served = set()
    for name, service in workers.items():
        broker_id = int(service["environment"]["TIERING_BROKER_ID"])
        broker = config.brokers[broker_id]
        queues = re.search(r"--queues (\S+)", service["command"]).group(1)  # type: ignore[union-attr]
        assert queues == broker.queue, name  # its broker's queue only
        assert service["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
        mounted = mounts(service)
        assert {str(d) for d in broker.log_dirs} <= set(mounted), name
        assert all(mounted[str(d)] == "ro" for d in broker.log_dirs), name
        assert not (set(mounted) & all_broker_dirs) - {str(d) for d in broker.log_dirs}, name  # no other broker's
        served.add(broker_id)
    assert served == set(config.brokers)
    for name, service in services.items():
        if name not in workers:
            assert not set(mounts(service)) & all_broker_dirs, name  # scheduler, API server, Spark: no broker disk


def test_no_secret_is_on_a_command_line() -> None:
    """Secrets reach a service through its environment, never its argv (``ps`` shows argv to
    every user of the host): Redis reads its password as config on standard input."""
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        command = service.get("command", "")
        command = " ".join(command) if isinstance(command, list) else str(command)
        assert not re.search(r"\$\{?[A-Z_]*(PASSWORD|SECRET|TOKEN)", command.replace("$$", "")), name
    assert "REDIS_PASSWORD" in compose["services"]["redis"]["environment"]


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
