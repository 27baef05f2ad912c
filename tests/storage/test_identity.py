"""The prefix's identity object: which metadata store writes under the prefix, written beside the
topics' directories and read back exactly; a missing one is None, a malformed or oversized one an
error naming the object."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.identity import (
    FORMAT_VERSION,
    IDENTITY_OBJECT,
    MAX_IDENTITY_BYTES,
    PrefixIdentity,
    identity_key,
    read_identity,
    write_identity,
)

STORE_ID = str(uuid.uuid4())


def storage(tmp_path: Path) -> FilesystemRemoteStorage:
    return FilesystemRemoteStorage(tmp_path / "tier", prefix="prod/")


def document(**changes: Any) -> bytes:
    doc = {"format_version": FORMAT_VERSION, "store_id": STORE_ID, "bound_at_ms": 1_700_000_000_000}
    doc["platform_version"] = "1.2.3"
    doc.update(changes)
    return json.dumps(doc).encode()


def test_written_beside_the_topics_and_read_back(tmp_path: Path) -> None:
    tier = storage(tmp_path)
    assert read_identity(tier) is None
    identity = PrefixIdentity(STORE_ID, 1_700_000_000_000, "1.2.3")
    write_identity(tier, identity)
    assert identity_key(tier) == "prod/" + IDENTITY_OBJECT
    assert (tmp_path / "tier" / "prod" / IDENTITY_OBJECT).is_file()
    assert read_identity(tier) == identity
    assert json.loads(identity.to_json())["store_id"] == STORE_ID


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"{not json", "not JSON"),
        (b"[]", f"not an identity object of format {FORMAT_VERSION}"),
        (document(format_version=FORMAT_VERSION + 1), f"not an identity object of format {FORMAT_VERSION}"),
        (document(store_id="store-1"), "store_id 'store-1' is not a UUID"),
        (document(store_id=STORE_ID.upper()), "is not a UUID"),
        (document(store_id=None), "store_id None is not a UUID"),
        (document(bound_at_ms=-1), "bound_at_ms -1 is not a time in milliseconds"),
        (document(bound_at_ms=True), "bound_at_ms True is not a time in milliseconds"),
        (document(bound_at_ms="1"), "bound_at_ms '1' is not a time in milliseconds"),
        (document(platform_version="9" * 65), "platform_version is not a version string"),
        (document(platform_version=3), "platform_version is not a version string"),
    ],
)
def test_a_malformed_identity_is_refused_naming_the_object_and_the_problem(
    tmp_path: Path, data: bytes, message: str
) -> None:
    tier = storage(tmp_path)
    tier.put_object(identity_key(tier), data)
    with pytest.raises(RemoteStorageError) as raised:
        read_identity(tier)
    assert message in str(raised.value)
    assert str(raised.value).startswith(tier.describe(identity_key(tier)))


def test_an_identity_larger_than_the_bound_is_refused_unparsed(tmp_path: Path) -> None:
    tier = storage(tmp_path)
    padded = document()[:-1] + b" " * (MAX_IDENTITY_BYTES + 1 - len(document())) + b"}"
    assert len(padded) == MAX_IDENTITY_BYTES + 1
    tier.put_object(identity_key(tier), padded)
    with pytest.raises(RemoteStorageError, match=f"larger than {MAX_IDENTITY_BYTES} bytes"):
        read_identity(tier)
    at_bound = padded[:-2] + b"}"
    assert len(at_bound) == MAX_IDENTITY_BYTES and json.loads(at_bound)
    tier.put_object(identity_key(tier), at_bound)
    assert read_identity(tier) == PrefixIdentity(STORE_ID, 1_700_000_000_000, "1.2.3")
