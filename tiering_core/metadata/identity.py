"""The store's identity (``tiering_store``): its id, and an unfinished ``tiering recover``.

The prefix a store writes under names the store's id in an identity object (``engine.binding``), so
a store pointed at another deployment's prefix, or a new, empty store pointed at a tier it never
wrote, writes and deletes nothing there. The id is given once, when the store's schema is created
(or upgraded to the revision that brought it), and survives a backup and its restore.
"""

from __future__ import annotations

from sqlalchemy import Table, func, select, update

from tiering_core.metadata.errors import MetadataStoreError
from tiering_core.metadata.models import StoreIdentityRow
from tiering_core.metadata.queries import P, S
from tiering_core.metadata.transactions import StoreCore, now_ms
from tiering_core.metadata.values import StoreIdentity

_store = StoreIdentityRow.__table__
assert isinstance(_store, Table)
STORE: Table = _store


class IdentityStore(StoreCore):
    """The store's identity, whether it holds anything, and an unfinished recovery."""

    def store_identity(self) -> StoreIdentity:
        with self._read() as conn:
            row = conn.execute(select(STORE).where(STORE.c.id == 1)).first()
        if row is None:
            raise MetadataStoreError(
                "the metadata store has no identity row (tiering_store): it was changed by hand; "
                "restore it from a backup or rebuild it with `tiering recover`"
            )
        return StoreIdentity(row.store_id, row.created_ms, row.recovery_started_ms)

    def holds_segments(self) -> bool:
        """Whether the store has recorded any segment, of any partition, in any state."""
        with self._read() as conn:
            return conn.execute(select(S.c.segment_id).limit(1)).first() is not None

    def holds_partitions(self) -> bool:
        """Whether the store knows any partition (a removed one's tombstone included)."""
        with self._read() as conn:
            return bool(conn.execute(select(func.count()).select_from(P)).scalar())

    def begin_recovery(self) -> StoreIdentity:
        """Mark a ``tiering recover`` as started (kept if one already is): until ``end_recovery``,
        the store writes nothing remote. Returns the identity as marked."""
        with self._write() as conn:
            conn.execute(
                update(STORE).where(STORE.c.id == 1, STORE.c.recovery_started_ms.is_(None)),
                {"recovery_started_ms": now_ms()},
            )
        return self.store_identity()

    def end_recovery(self) -> None:
        with self._write() as conn:
            conn.execute(update(STORE).where(STORE.c.id == 1), {"recovery_started_ms": None})
