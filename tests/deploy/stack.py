"""The compose stack of ``docker/`` on a test engine: its files, its commands, its project.

The commands are the "Docker" commands of docs/deployment.md, with the test's own env file, config and token file
(``TIERING_CONFIG_FILE``, ``TIERING_METRICS_TOKEN_FILE``) and ``docker/debian/docker-compose.yml``,
which builds every image from Debian's packages.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.engine import DOCKER_DIR, Engine
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
