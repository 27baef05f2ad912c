"""The store fixture of the metadata tests: a store over a fresh database on each real backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tiering_core.metadata.store import RemoteLogMetadataStore


@pytest.fixture()
def store(metadata_url: str) -> Iterator[RemoteLogMetadataStore]:
    with RemoteLogMetadataStore(metadata_url) as s:
        yield s
