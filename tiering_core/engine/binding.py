"""Store and prefix know each other: a metadata store writes and deletes only under the prefix
bound to it (docs/operations.md, "Store and bucket").

A store gets its id when it is created; the first write under a prefix leaves the identity object
(``storage.identity``) naming it. From then on a store whose id is not the prefix's writes and
deletes nothing there, and neither does a store that is empty while the prefix, never bound, holds
finished segments (a mistyped ``metadata.url`` gives exactly that store): to such a store every
object is unknown, so a copy would upload every segment again and an orphan sweep would take
every object for an orphan. A store with an unfinished ``tiering recover`` writes nothing either.

Each process checks once, before its first write or deletion (``ObjectStore.write_check``), so
the check costs one GET per process; a refusal is one line saying what was found and what to run.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from tiering_core import __version__
from tiering_core.config.metadata import safe_url
from tiering_core.errors import StoreBindingError
from tiering_core.humanize import fmt_utc
from tiering_core.storage.identity import PrefixIdentity, identity_key, read_identity, write_identity
from tiering_core.storage.layout import ObjectKind, parse_segment_key

if TYPE_CHECKING:
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)


def first_finished_manifest(storage: RemoteStorage) -> str | None:
    """The key of a segment manifest under the prefix, if any (the first found: listing stops there)."""
    suffix = f".{ObjectKind.MANIFEST.value}"
    for tip in storage.remote_partitions():
        for obj in storage.list_objects(tip):
            if obj.key.endswith(suffix) and parse_segment_key(obj.key, storage.prefix) is not None:
                return obj.key
    return None


def bind(store: RemoteLogMetadataStore, storage: RemoteStorage) -> PrefixIdentity:
    """Write the prefix's identity object naming ``store`` (what the first write and a finished
    recovery do), then read it back: another store binding the same prefix at the same moment wins
    or loses as a whole."""
    mine = store.store_identity().store_id
    write_identity(storage, PrefixIdentity(mine, int(time.time() * 1000), __version__))
    found = read_identity(storage)
    if found is None or found.store_id != mine:
        raise StoreBindingError(
            f"{storage.describe(identity_key(storage))}: another metadata store bound the prefix at the same "
            f"time ({found.store_id if found else 'gone'}); nothing was written: check metadata.url"
        )
    log.info("%s: bound to metadata store %s", storage.describe(identity_key(storage)), mine)
    return found


def check_binding(store: RemoteLogMetadataStore, storage: RemoteStorage) -> PrefixIdentity:
    """The prefix's identity once this store may write under it, binding an unbound prefix;
    ``StoreBindingError`` (one line: what was found, what to run) when it may not."""
    me = store.store_identity()
    where = storage.describe(identity_key(storage))
    url = safe_url(store.url)
    if me.recovering:
        raise StoreBindingError(
            f"metadata store {url}: a `tiering recover` into it started {fmt_utc(me.recovery_started_ms or 0)} "
            "and has not finished; nothing was written: run `tiering recover` again to finish it"
        )
    found = read_identity(storage)
    if found is not None:
        if found.store_id != me.store_id:
            raise StoreBindingError(
                f"{where} binds the prefix to metadata store {found.store_id} (since {fmt_utc(found.bound_at_ms)}, "
                f"platform {found.platform_version}), not to {url} ({me.store_id}); nothing was written: point "
                "metadata.url at that store, or if it is lost, rebuild a store with `tiering recover`"
            )
        return found
    if not store.holds_segments():
        manifest = first_finished_manifest(storage)
        if manifest is not None:
            raise StoreBindingError(
                f"metadata store {url} is empty, and {storage.describe(manifest)} is a finished segment under "
                "the prefix it has never written to; nothing was written: point metadata.url at the store that "
                "copied it, or rebuild one from the bucket with `tiering recover`"
            )
    return bind(store, storage)


class PrefixBinding:
    """``check_binding`` once per process, as a storage's ``write_check``: passed once, it is not
    asked again; refused, it is asked again at the next write (an operator may have fixed it)."""

    def __init__(self, store: RemoteLogMetadataStore, storage: RemoteStorage) -> None:
        self._store = store
        self._storage = storage
        self._lock = threading.Lock()
        self.identity: PrefixIdentity | None = None

    def __call__(self) -> None:
        if self.identity is not None:
            return
        with self._lock:
            if self.identity is None:
                self.identity = check_binding(self._store, self._storage)
