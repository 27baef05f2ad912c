"""What a rebuild finds about a segment's indexes: verdicts, and the comparison of stored with rebuilt
indexes (indexes can always be rebuilt by walking batch headers, docs/kafka-rules.md section 1).
"""

from __future__ import annotations

import logging
from pathlib import Path

from tiering_core.events.rebuild import IndexFinding, IndexStatus
from tiering_core.kafka.index_check import IndexVerdict, check_broker_index
from tiering_core.storage.layout import ObjectKind

log = logging.getLogger(__name__)


INDEX_KINDS = (ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX)
#: Objects a repaired copy takes over unchanged from the damaged one.
CARRIED_KINDS = (ObjectKind.PRODUCER_SNAPSHOT, ObjectKind.LEADER_EPOCH_CHECKPOINT)


def _first_difference(a: bytes, b: bytes) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare_index(kind: ObjectKind, stored: bytes | None, rebuilt: bytes) -> IndexFinding:
    """Byte comparison; an absent transaction index equals an empty one (Kafka creates it lazily)."""
    if stored is None:
        if kind == ObjectKind.TRANSACTION_INDEX and not rebuilt:
            return IndexFinding(kind, IndexStatus.OK, None, 0)
        return IndexFinding(kind, IndexStatus.MISSING, None, len(rebuilt), "not stored")
    if stored == rebuilt:
        return IndexFinding(kind, IndexStatus.OK, len(stored), len(rebuilt))
    at = _first_difference(stored, rebuilt)
    return IndexFinding(
        kind,
        IndexStatus.DIFFERED,
        len(stored),
        len(rebuilt),
        f"{len(stored)} bytes stored, {len(rebuilt)} rebuilt, first difference at byte {at}",
    )


def judge_index(
    kind: ObjectKind,
    stored: bytes | None,
    rebuilt: bytes,
    log_path: Path,
    base_offset: int,
    *,
    is_active: bool = False,
    path: Path = Path("<memory>"),
) -> IndexFinding:
    """An offset or time index is fine when it is the rebuild or differs from it only as real
    brokers write indexes (after restarts, follower fetches, ``recover``): every lookup through it
    is right (``kafka.index.check_broker_index``). A damaged one names the entry and its byte.
    The transaction index, which no such history changes, is compared byte for byte."""
    if stored is None or kind == ObjectKind.TRANSACTION_INDEX:
        return compare_index(kind, stored, rebuilt)
    judged = check_broker_index(
        "offset" if kind == ObjectKind.OFFSET_INDEX else "time",
        stored,
        rebuilt,
        log_path,
        base_offset,
        is_active=is_active,
        path=path,
    )
    if judged.verdict == IndexVerdict.IDENTICAL:
        return IndexFinding(kind, IndexStatus.OK, len(stored), len(rebuilt))
    if judged.verdict == IndexVerdict.EQUIVALENT:
        return IndexFinding(kind, IndexStatus.OK, len(stored), len(rebuilt), f"equivalent: {judged.detail}")
    return IndexFinding(kind, IndexStatus.DIFFERED, len(stored), len(rebuilt), judged.detail)
