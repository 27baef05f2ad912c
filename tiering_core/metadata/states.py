"""Kafka's remote segment and partition-deletion state machines, in one place.

``check_*_transition`` is the only judge of a state change: the store, the copier, retention
and removal all go through it, so the tables below are the whole truth (docs/kafka-rules.md
section 4).
"""

from __future__ import annotations

from enum import StrEnum

from tiering_core.metadata.errors import InvalidStateTransitionError


class RemoteLogSegmentState(StrEnum):
    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"


class RemotePartitionDeleteState(StrEnum):
    DELETE_PARTITION_MARKED = "DELETE_PARTITION_MARKED"
    DELETE_PARTITION_STARTED = "DELETE_PARTITION_STARTED"
    DELETE_PARTITION_FINISHED = "DELETE_PARTITION_FINISHED"


_S = RemoteLogSegmentState
SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    _S.COPY_SEGMENT_STARTED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset(),
}
_P = RemotePartitionDeleteState
# None: a live partition (no deletion asked for yet).
PARTITION_TRANSITIONS: dict[RemotePartitionDeleteState | None, frozenset[RemotePartitionDeleteState]] = {
    None: frozenset({_P.DELETE_PARTITION_MARKED}),
    _P.DELETE_PARTITION_MARKED: frozenset({_P.DELETE_PARTITION_STARTED}),
    _P.DELETE_PARTITION_STARTED: frozenset({_P.DELETE_PARTITION_FINISHED}),
    _P.DELETE_PARTITION_FINISHED: frozenset(),
}
NO_DELETE_STATE = "NONE"


def check_segment_transition(current: RemoteLogSegmentState, new: RemoteLogSegmentState, subject: str) -> bool:
    """True if the state changes, False for a same-state no-op; raises for a forbidden change."""
    if current == new:
        return False
    if new not in SEGMENT_TRANSITIONS[current]:
        raise InvalidStateTransitionError(subject, current.value, new.value)
    return True


def check_partition_transition(
    current: RemotePartitionDeleteState | None, new: RemotePartitionDeleteState, subject: str
) -> bool:
    """As ``check_segment_transition`` for the partition-deletion states."""
    if current == new:
        return False
    if new not in PARTITION_TRANSITIONS[current]:
        raise InvalidStateTransitionError(subject, current.value if current is not None else NO_DELETE_STATE, new.value)
    return True
