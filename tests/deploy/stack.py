"""The compose stack of ``docker/`` on a test engine: its files, its commands, its project, and the
started stack as the tests drive it (``Deployment``: commands and scripts in its containers, its DAGs
through Airflow's REST API).

The commands are the "Docker" commands of docs/deployment.md, with the test's own env file, config and token file
(``TIERING_CONFIG_FILE``, ``TIERING_METRICS_TOKEN_FILE``) and ``docker/debian/docker-compose.yml``,
which builds every image from Debian's packages.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.airflow_e2e import Api
from tests.deploy.engine import DOCKER_DIR, Engine
from tests.deploy.scripts import EXPORTED, S3_KEYS, TOPIC
from tests.services import ServiceUnavailable, last_line

COMPOSE_FILES = (DOCKER_DIR / "docker-compose.yml", DOCKER_DIR / "debian" / "docker-compose.yml")
#: The env file's keys, the recipe of docs/deployment.md; the values are made fresh for each stack.
ENV_KEYS = (
    "POSTGRES_PASSWORD",
    "AIRFLOW_DB_PASSWORD",
    "CELERY_RESULTS_PASSWORD",
    "TIERING_METADATA_PASSWORD",
    "ICEBERG_CATALOG_PASSWORD",
    "REDIS_PASSWORD",
    "MINIO_ROOT_USER",
    "MINIO_ROOT_PASSWORD",
    "S3_ACCESS_KEY_ID",
    "S3_SECRET_ACCESS_KEY",
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_FERNET_KEY",
    "SPARK_AUTH_SECRET",
    "GRAFANA_ADMIN_PASSWORD",
)


def fresh_env_file(path: Path) -> dict[str, str]:
    """An env file as the recipe of docs/deployment.md writes it (mode 0600): fresh random values."""
    import base64

    values = {key: secrets.token_hex(24) for key in ENV_KEYS}
    values["MINIO_ROOT_USER"] = "tiering-root"
    values["S3_ACCESS_KEY_ID"] = "tiering-platform"
    values["AIRFLOW_FERNET_KEY"] = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    path.touch(mode=0o600)
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return values


@dataclass
class Compose:
    """``docker-compose`` on one engine, one project, one env file."""

    engine: Engine
    project: str
    env_file: Path
    files: Sequence[Path] = COMPOSE_FILES
    variables: Mapping[str, str] = field(default_factory=dict)

    def command(self, *args: str) -> list[str]:
        files = [part for path in self.files for part in ("-f", str(path))]
        return ["docker-compose", "--project-name", self.project, "--env-file", str(self.env_file), *files, *args]

    def run(
        self, *args: str, timeout: float = 1800, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**self.engine.env, **self.variables}
        proc = subprocess.run(
            self.command(*args), capture_output=True, text=True, env=env, timeout=timeout, input=stdin
        )
        if check and proc.returncode != 0:
            raise ServiceUnavailable(f"docker-compose {args[0]} failed (exit {proc.returncode}): {why(proc)}")
        return proc


def why(proc: subprocess.CompletedProcess[str]) -> str:
    """docker-compose's own errors (it prints them among its progress lines), else its last line."""
    errors = [line.strip() for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    return "; ".join(errors) if errors else last_line(proc.stderr or proc.stdout)


def build_images(engine: Engine) -> None:
    """Every image of the stack, built by the build command of docs/deployment.md (cached layers are reused)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tiering-build-") as scratch:
        env_file = Path(scratch) / "build.env"
        fresh_env_file(env_file)  # the build reads no value, but every variable must be set
        compose = Compose(engine, "tiering-build", env_file)
        print("deploy: docker-compose build", file=sys.stderr, flush=True)
        proc = compose.run("build", "--parallel", timeout=3600, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
            print(tail, file=sys.stderr)
            raise ServiceUnavailable(
                f"docker-compose build failed (exit {proc.returncode}): {last_line(proc.stderr or proc.stdout)}"
            )


def platform_image() -> str:
    return os.environ.get("TIERING_IMAGE", "kafka-tiering:latest")


@dataclass
class Deployment:
    """The started stack: its compose project, Airflow's REST API, the test's files."""

    compose: Compose
    api: Api
    work: Path

    def python(self, service: str, script: str, *, python: str = "/opt/venv/bin/python") -> str:
        """A script run by ``service``'s own Python inside its container (on the stack's network)."""
        return self.compose.run("exec", "-T", service, python, "-", stdin=script, timeout=300).stdout

    def s3_keys(self) -> list[str]:
        return list(json.loads(self.python("minio", S3_KEYS, python="/opt/s3/bin/python").strip().splitlines()[-1]))

    def closed_segments(self, broker: int, partition: int) -> list[int]:
        """Base offsets of the closed segments of ``orders-<partition>`` in broker ``broker``'s log
        dir: every ``.log`` but the active (last) one, as its worker reads them."""
        out = self.compose.run(
            "exec", "-T", f"airflow-worker-broker-{broker}", "ls", f"/var/lib/kafka/broker-{broker}/{TOPIC}-{partition}"
        ).stdout
        bases = sorted(int(name[: -len(".log")]) for name in out.split() if name.endswith(".log"))
        return bases[:-1]

    def remote_segments(self, partition: int) -> list[dict[str, Any]]:
        out = self.compose.run(
            "exec",
            "-T",
            "airflow-worker",
            "tiering",
            "--json",
            "segments",
            "--topic",
            TOPIC,
            "--partition",
            str(partition),
        ).stdout
        listed = json.loads(out)
        return list(listed["segments"] if isinstance(listed, dict) else listed)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return list(
            self.api.ok("GET", f"{self.api.run_path(dag_id, run_id)}/taskInstances?limit=500")["task_instances"]
        )

    def run(self, dag_id: str, conf: dict[str, Any] | None = None, *, expect: str = "success") -> str:
        """Trigger ``dag_id`` and wait for its run to end in ``expect``; otherwise the failure shows
        each failed task's log, as the API serves it."""
        run_id = self.api.trigger(dag_id, conf)
        self.finished(dag_id, run_id, expect)
        return run_id

    def finished(self, dag_id: str, run_id: str, expect: str = "success", timeout: float = 900) -> None:
        state = self.api.wait_run(dag_id, run_id, timeout)
        if state == expect:
            return
        logs = []
        for ti in self.task_instances(dag_id, run_id):
            if ti["state"] == "failed":
                task, attempt, index = ti["task_id"], ti["try_number"], ti["map_index"]
                path = f"{self.api.run_path(dag_id, run_id)}/taskInstances/{task}/logs/{attempt}?map_index={index}"
                logs.append(f"{task}: {str(self.api.call('GET', path)[1])[-3000:]}")
        raise AssertionError(f"{dag_id} {run_id} ended {state}, not {expect}:\n" + "\n".join(logs))

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """The last try's log of ``task_id`` as the API serves it, one line per event."""
        (ti,) = [ti for ti in self.task_instances(dag_id, run_id) if ti["task_id"] == task_id]
        path = f"{self.api.run_path(dag_id, run_id)}/taskInstances/{task_id}/logs/{ti['try_number']}?map_index=-1"
        answer = self.api.ok("GET", path)
        content = answer.get("content", answer) if isinstance(answer, dict) else answer
        if isinstance(content, list):
            return "\n".join(str(e.get("event", e)) if isinstance(e, dict) else str(e) for e in content)
        return str(content)

    def exported(self) -> dict[int, dict[str, Any]]:
        """Per partition, what the topic's export table holds, read with pyiceberg on the default
        queue's worker (the catalog's password is its own): rows, distinct offsets, the first and
        last, rows whose record is not the one produced at their offset, the table's location."""
        out = self.python("airflow-worker", EXPORTED).strip().splitlines()[-1]
        return {int(p): found for p, found in json.loads(out).items()}

    def container_hostname(self, service: str) -> str:
        return self.compose.run("exec", "-T", service, "hostname").stdout.strip()
