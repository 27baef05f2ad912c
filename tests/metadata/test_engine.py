"""The database under the store (``tiering_core/metadata/engine.py``): an unreachable server
named without its password, SQLite's WAL checkpointed in the background, an in-memory SQLite URL
refused."""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.engine_support import wait_until
from tests.metadata.support import finish, segment, tip
from tests.services import free_port
from tiering_core.metadata.errors import (
    MetadataStoreError,
)
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.metadata.store import RemoteLogMetadataStore

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = tip("BBBBBBBBBBBBBBBBBBBBBB", "orders", 3)
OTHER = tip("DDDDDDDDDDDDDDDDDDDDDD", "payments", 0)
TIP_RE = re.escape(str(TIP))


def test_unreachable_database_is_a_metadata_store_error_without_the_password() -> None:
    url = f"postgresql+psycopg://tiering:s3cret-pw@127.0.0.1:{free_port()}/meta?connect_timeout=2"
    with pytest.raises(MetadataStoreError) as err:
        RemoteLogMetadataStore(url)
    assert "s3cret-pw" not in str(err.value) and "127.0.0.1" in str(err.value)
    with pytest.raises(MetadataStoreError, match="bad metadata store url"):
        RemoteLogMetadataStore("nosuchdialect://x")


def test_a_password_in_a_query_parameter_is_masked_too() -> None:
    url = f"postgresql+psycopg://tiering@127.0.0.1:{free_port()}/meta?password=s3cret-q&connect_timeout=2"
    with pytest.raises(MetadataStoreError) as err:
        RemoteLogMetadataStore(url)
    assert "s3cret-q" not in str(err.value) and "password=***" in str(err.value) and "127.0.0.1" in str(err.value)


def test_sqlite_wal_is_checkpointed_in_the_background(sqlite_url: str) -> None:
    path = make_url(sqlite_url).database
    with RemoteLogMetadataStore(sqlite_url) as store:
        lease = store.acquire_lease(TIP, "t")
        for i in range(5):
            finish(store, lease, segment(TIP, 100 * i, 100 * i + 99))

        def rows_in_database_file() -> int:  # immutable=1 reads the main file only, not the WAL
            conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
            try:
                return int(conn.execute("SELECT count(*) FROM tiering_segments").fetchone()[0])
            except sqlite3.DatabaseError:  # not even the schema is in the file yet, or a checkpoint
                return 0  # is writing the pages this read met (immutable=1 takes no lock): look again
            finally:
                conn.close()

        wait_until(lambda: rows_in_database_file() >= 5, what="the WAL to be checkpointed")
        assert any(t.name.startswith("wal-checkpoint:") for t in threading.enumerate())
    assert not any(t.name == f"wal-checkpoint:{path}" for t in threading.enumerate())


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?cache=shared&uri=true"])
def test_an_in_memory_sqlite_url_is_refused_naming_the_setting(url: str, tmp_path: Path) -> None:
    from tiering_core.config import parse_config

    doc = {"log_dirs": ["kafka"], "metadata": {"url": url}, "remote": {"backend": "filesystem", "root": "tier"}}
    configured = parse_config(doc, base_dir=tmp_path).metadata.url  # not turned into a file path
    for candidate in (url, configured):
        with pytest.raises(MetadataStoreError, match=r"metadata\.url .*in-memory SQLite.*sqlite:///path"):
            RemoteLogMetadataStore(candidate)
