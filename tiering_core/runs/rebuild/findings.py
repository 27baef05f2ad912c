"""What a rebuild finds about a segment's indexes: verdicts, and the comparison of stored with rebuilt
indexes (indexes can always be rebuilt by walking batch headers, docs/kafka-rules.md section 1).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from tiering_core.kafka.index_check import IndexVerdict, check_broker_index
from tiering_core.storage.layout import ObjectKind

log = logging.getLogger(__name__)


INDEX_KINDS = (ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX)
#: Objects a repaired copy takes over unchanged from the damaged one.
CARRIED_KINDS = (ObjectKind.PRODUCER_SNAPSHOT, ObjectKind.LEADER_EPOCH_CHECKPOINT)


class IndexStatus(StrEnum):
    OK = "ok"
    MISSING = "missing"
    DIFFERED = "differed"
    REPAIRED = "repaired"
    ERROR = "error"


@dataclass(frozen=True)
class IndexFinding:
    """One index of one segment: what is stored against what the ``.log`` rebuilds to."""

    kind: ObjectKind
    status: IndexStatus  # ok, missing or differed
    stored_bytes: int | None
    rebuilt_bytes: int
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "status": self.status.value,
            "stored_bytes": self.stored_bytes,
            "rebuilt_bytes": self.rebuilt_bytes,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class IndexCheck:
    """The verdict on one segment's indexes (remote or local)."""

    topic: str
    partition: int
    base_offset: int
    end_offset: int | None
    location: str  # "remote" or "local"
    segment_id: str | None
    findings: tuple[IndexFinding, ...] = ()
    log_bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    repaired_as: str | None = None
    damaged_log: bool = False  # the error is a remote object that does not match its recorded checksum

    @property
    def needs_repair(self) -> bool:
        return self.error is None and any(f.status != IndexStatus.OK for f in self.findings)

    @property
    def status(self) -> IndexStatus:
        if self.error is not None:
            return IndexStatus.ERROR
        if self.repaired_as is not None:
            return IndexStatus.REPAIRED
        found = {f.status for f in self.findings}
        if IndexStatus.MISSING in found:
            return IndexStatus.MISSING
        if IndexStatus.DIFFERED in found:
            return IndexStatus.DIFFERED
        return IndexStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "base_offset": self.base_offset,
            "end_offset": self.end_offset,
            "location": self.location,
            "segment_id": self.segment_id,
            "status": self.status.value,
            "indexes": [f.to_dict() for f in self.findings],
            "log_bytes": self.log_bytes,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "damaged_log": self.damaged_log,
            "repaired_as": self.repaired_as,
        }


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
