"""Publishing a partition's ``partition-state.json`` (``storage.partition_state``) after the
metadata store commits a change to it.

The store stays the root of trust; the object is a copy of what the store holds of a partition
beyond its segments (its remote log start offset, the highest DeleteRecords offset applied through
the platform, its tiering gaps), so that a store lost with its backups can be rebuilt from the
bucket. Each run that changes one of them publishes it under the partition's lease, once the
store has committed: retention moving the remote log start, the first finished copy or
``repair_remote_log_start`` setting it, a DeleteRecords applied, a tiering gap recorded.

What is written is read from the store at that moment, whole, never the change alone: an object a
failed write left behind is made right by the next change. A failure to write it (or to read the
store for it) never fails the run that made the change: a warning names the partition.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from tiering_core.errors import TieringError
from tiering_core.storage.partition_state import PartitionState

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)


def partition_state(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> PartitionState:
    """What the store holds of ``tip`` for its state object, stamped with this host's clock."""
    return PartitionState(
        topic_id_partition=tip,
        remote_log_start_offset=store.get_remote_log_start_offset(tip),
        delete_records_offset=store.get_delete_records_offset(tip),
        gaps=tuple((gap.start, gap.end) for gap in store.list_gaps(tip)),
        updated_at_ms=int(time.time() * 1000),
    )


def publish_partition_state(
    store: RemoteLogMetadataStore,
    storage: RemoteStorage,
    tip: TopicIdPartition,
    *,
    last: PartitionState | None = None,
) -> PartitionState | None:
    """Write ``tip``'s state object from what the store holds now, unless that is ``last`` (what
    the calling run wrote before: the same content is not written again).

    Returns what the object holds as far as the caller knows: the state written (or ``last``,
    unchanged), or ``last`` again when it could not be written, which is logged as a warning
    naming the partition and never raised.
    """
    try:
        state = partition_state(store, tip)
        if state == last:
            return last
        storage.write_partition_state(state)
    except (TieringError, OSError) as exc:
        log.warning(
            "%s: could not write its partition-state.json (the next change of its remote log start, "
            "DeleteRecords or gaps writes it whole): %s",
            tip,
            exc,
        )
        return last
    return state
