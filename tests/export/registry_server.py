"""A real Confluent-compatible Schema Registry for the tests: Apicurio Registry from Maven Central.

``io.apicurio:apicurio-registry-app:<version>:tar.gz:all`` unpacks to a Quarkus runner jar that
serves the Confluent API at ``/apis/ccompat/v7`` on Java 17, keeping its schemas in memory. It is
fetched once with Maven into the test cache (the test command fetches it before the suite, while
the network is there: ``python -m tests.export.registry_server fetch``), started privately on
127.0.0.1 and free ports, and stopped with the test process (the rules of ``tests/services.py``).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.maven import FETCH_TIMEOUT
from tests.real_kafka.cluster import cache_root
from tests.services import (
    STARTED,
    TEST_JVM_OPTIONS,
    ServerProcess,
    ServiceUnavailable,
    StartedService,
    current_account,
    free_port,
    last_line,
)

VERSION = "3.0.9"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
RUNNER = f"apicurio-registry-app-{VERSION}-runner.jar"
#: The Confluent-compatible API under the registry's root.
CCOMPAT_PATH = "/apis/ccompat/v7"


@dataclass(frozen=True)
class RegistryServer:
    """A running registry: its Confluent-compatible API's URL."""

    url: str

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def fetch_registry() -> Path:
    """The unpacked registry in the test cache (fetched with Maven the first time)."""
    home = cache_root() / f"apicurio-registry-{VERSION}"
    runner = home / RUNNER
    if runner.is_file():
        return home
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceUnavailable(f"cannot fetch {ARTIFACT}: mvn is not on PATH")
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".apicurio-{VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if runner.is_file():
            return home
        staging = Path(tempfile.mkdtemp(prefix="apicurio-", dir=home.parent))
        try:
            proc = subprocess.run(
                [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={staging}"],
                capture_output=True,
                text=True,
                timeout=FETCH_TIMEOUT,
                cwd=staging,
            )
            archives = list(staging.glob("*.tar.gz"))
            if proc.returncode != 0 or not archives:
                raise ServiceUnavailable(f"mvn could not fetch {ARTIFACT}: {last_line(proc.stdout + proc.stderr)}")
            unpacked = staging / "unpacked"
            with tarfile.open(archives[0]) as archive:
                archive.extractall(unpacked, filter="data")
            if not (unpacked / RUNNER).is_file():
                raise ServiceUnavailable(f"{ARTIFACT} holds no {RUNNER}")
            unpacked.rename(home)
        except subprocess.TimeoutExpired as exc:
            raise ServiceUnavailable(f"mvn did not fetch {ARTIFACT} within {FETCH_TIMEOUT:.0f} s") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return home


@contextmanager
def registry_server(scratch: Path) -> Iterator[RegistryServer]:
    """A private registry on loopback, in memory, stopped when the context ends."""
    home = fetch_registry()
    java = shutil.which("java")
    if java is None:
        raise ServiceUnavailable("cannot run the schema registry: java is not on PATH (Java 17 is needed)")
    port, management = free_port(), free_port()
    args = [
        java,
        "-Xmx256m",
        *TEST_JVM_OPTIONS,
        f"-Dquarkus.http.port={port}",
        "-Dquarkus.http.host=127.0.0.1",
        f"-Dquarkus.management.port={management}",
        "-Dquarkus.management.host=127.0.0.1",
        "-jar",
        str(home / RUNNER),
    ]
    scratch.mkdir(parents=True, exist_ok=True)
    server = ServerProcess.start("the schema registry", args, log=scratch / "registry.log", account=current_account())
    try:
        handle = RegistryServer(f"http://127.0.0.1:{port}{CCOMPAT_PATH}")
        server.wait_until(handle.answers, timeout=120)
        STARTED.append(StartedService("Schema Registry (Apicurio)", f"127.0.0.1:{port}", f"Maven Central ({home})"))
        yield handle
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    """``fetch``: fill the cache before the suite runs."""
    if argv != ["fetch"]:
        print("usage: python -m tests.export.registry_server fetch", file=sys.stderr)
        return 2
    try:
        home = fetch_registry()
    except ServiceUnavailable as exc:
        print(f"Schema Registry for the tests: unavailable: {exc}", file=sys.stderr)
        return 1
    print(f"Schema Registry for the tests: Apicurio {VERSION} from {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
