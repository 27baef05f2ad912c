"""The export tests' servers beyond the suite's own: a real Schema Registry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import provided
from tests.export.registry_server import RegistryServer, registry_server


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A Confluent-compatible registry (Apicurio, in memory) for the whole test process."""
    yield from provided("Schema Registry", registry_server(tmp_path_factory.mktemp("registry")))
