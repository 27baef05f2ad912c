"""The prefix's identity object, ``<prefix>tiering-store.json``: which metadata store writes here.

Written by the first write of a store under the prefix (``engine.binding``) and by ``tiering
recover`` once it has rebuilt a store; read before a process's first write or deletion. It sits
beside the topics' directories, outside the segment layout, so no sweep ever takes it for an
orphan. Small and bounded: a larger or malformed object is refused unread or unparsed.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiering_core.storage.errors import RemoteObjectNotFoundError, RemoteStorageError

if TYPE_CHECKING:
    from tiering_core.storage.objects import ObjectStore

IDENTITY_OBJECT = "tiering-store.json"
FORMAT_VERSION = 1
MAX_IDENTITY_BYTES = 4096


@dataclass(frozen=True)
class PrefixIdentity:
    """The store a prefix is bound to: its id, when it was bound, and by which platform version."""

    store_id: str
    bound_at_ms: int
    platform_version: str

    def to_json(self) -> bytes:
        doc = {
            "format_version": FORMAT_VERSION,
            "store_id": self.store_id,
            "bound_at_ms": self.bound_at_ms,
            "platform_version": self.platform_version,
        }
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> PrefixIdentity:
        try:
            doc: Any = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise RemoteStorageError(f"not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
            raise RemoteStorageError(f"not an identity object of format {FORMAT_VERSION}")
        store_id, bound, version = doc.get("store_id"), doc.get("bound_at_ms"), doc.get("platform_version")
        try:
            valid_id = isinstance(store_id, str) and str(uuid.UUID(store_id)) == store_id
        except ValueError:
            valid_id = False
        if not valid_id:
            raise RemoteStorageError(f"store_id {store_id!r} is not a UUID")
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 0:
            raise RemoteStorageError(f"bound_at_ms {bound!r} is not a time in milliseconds")
        if not isinstance(version, str) or len(version) > 64:
            raise RemoteStorageError("platform_version is not a version string")
        return cls(str(store_id), bound, version)


def identity_key(storage: ObjectStore) -> str:
    return f"{storage.prefix}{IDENTITY_OBJECT}"


def read_identity(storage: ObjectStore) -> PrefixIdentity | None:
    """The prefix's identity, None if it has none; a malformed one is a RemoteStorageError naming it."""
    key = identity_key(storage)
    try:
        data = storage.get_range(key, 0, MAX_IDENTITY_BYTES)
    except RemoteObjectNotFoundError:
        return None
    if len(data) > MAX_IDENTITY_BYTES:
        raise RemoteStorageError(f"{storage.describe(key)}: larger than {MAX_IDENTITY_BYTES} bytes")
    try:
        return PrefixIdentity.from_json(data)
    except RemoteStorageError as exc:
        raise RemoteStorageError(f"{storage.describe(key)}: {exc}") from None


def write_identity(storage: ObjectStore, identity: PrefixIdentity) -> None:
    storage.put_object(identity_key(storage), identity.to_json())
