"""The export tests' servers beyond the suite's own: a real Schema Registry and a real Iceberg REST
catalog; and the test process's local Spark, the typed tables' third reader."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import provided
from tests.export.registry_server import RegistryServer, registry_server
from tests.export.rest_catalog import RestCatalogServer, rest_catalog_server
from tests.spark_support import local_spark


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A Confluent-compatible registry (Apicurio, in memory) for the whole test process."""
    yield from provided("Schema Registry", registry_server(tmp_path_factory.mktemp("registry")))


@pytest.fixture(scope="session")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalogServer]:
    """Apache Iceberg's REST catalog server (a JDBC catalog in SQLite) for the whole test process;
    each test's tables go in a namespace of its own."""
    yield from provided("Iceberg REST catalog", rest_catalog_server(tmp_path_factory.mktemp("rest-catalog")))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The test process's local[2] SparkSession (the one the Spark apps' tests use)."""
    yield from local_spark()
