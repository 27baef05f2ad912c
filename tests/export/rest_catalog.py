"""A real Iceberg REST catalog for the tests: Apache Iceberg's REST catalog server.

``org.apache.iceberg.rest.RESTCatalogServer`` (iceberg-open-api's test fixtures) serves the
REST catalog API over a JDBC catalog in SQLite, its warehouse a local directory. Its jars
(``rest_catalog_pom.xml``) are fetched once with Maven into the test cache (the test command
fetches them before the suite: ``python -m tests.export.rest_catalog fetch``); the server is
started privately on 127.0.0.1 and a free port, and stopped with the test process (the rules of
``tests/services.py``).
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.maven import fetch_dependencies
from tests.real_kafka.cluster import cache_root
from tests.services import (
    STARTED,
    TEST_JVM_OPTIONS,
    ServerProcess,
    ServiceUnavailable,
    StartedService,
    current_account,
    free_port,
)

POM = Path(__file__).with_name("rest_catalog_pom.xml")
VERSION = "1.10.1"
MAIN = "org.apache.iceberg.rest.RESTCatalogServer"


@dataclass(frozen=True)
class RestCatalogServer:
    """A running REST catalog: its URI and the warehouse directory its tables are written under."""

    uri: str
    warehouse: Path

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


def fetch_rest_catalog() -> Path:
    """The server's jars in the test cache (fetched with Maven the first time)."""
    what = f"Iceberg's REST catalog server {VERSION}"
    return fetch_dependencies(POM, cache_root() / f"iceberg-rest-catalog-{VERSION}", what, "iceberg-open-api-*.jar")


@contextmanager
def rest_catalog_server(scratch: Path) -> Iterator[RestCatalogServer]:
    """A private REST catalog on loopback, its catalog in memory, stopped when the context ends."""
    libs = fetch_rest_catalog()
    java = shutil.which("java")
    if java is None:
        raise ServiceUnavailable("cannot run the REST catalog: java is not on PATH (Java 17 is needed)")
    port = free_port()
    warehouse = scratch / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    args = [java, "-Xmx384m", *TEST_JVM_OPTIONS, "-cp", f"{libs}/*", MAIN]
    env = {**os.environ, "CATALOG_REST_PORT": str(port), "CATALOG_WAREHOUSE": warehouse.as_uri()}
    server = ServerProcess.start(
        "the REST catalog", args, log=scratch / "rest-catalog.log", account=current_account(), env=env
    )
    try:
        handle = RestCatalogServer(f"http://127.0.0.1:{port}", warehouse)
        server.wait_until(handle.answers, timeout=120)
        STARTED.append(StartedService("Iceberg REST catalog", f"127.0.0.1:{port}", f"Maven Central ({libs})"))
        yield handle
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    """``fetch``: fill the cache before the suite runs."""
    if argv != ["fetch"]:
        print("usage: python -m tests.export.rest_catalog fetch", file=sys.stderr)
        return 2
    try:
        libs = fetch_rest_catalog()
    except ServiceUnavailable as exc:
        print(f"Iceberg REST catalog for the tests: unavailable: {exc}", file=sys.stderr)
        return 1
    print(f"Iceberg REST catalog for the tests: {VERSION} from {libs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
