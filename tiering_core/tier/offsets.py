"""Offsets over the tier as plain values: an inclusive range (a tiering gap, what only the remote
tier holds), the global log start, the first offset the remote tier serves, and ranges merged.

Apart from the tier view (``view.py``) because they need neither the broker's files nor a view:
the tier view derives its offsets with them, and readers of the store alone (the snapshot, the
cluster view, export and replay) use them without loading a partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore


@dataclass(frozen=True)
class OffsetRange:
    """An inclusive offset range, e.g. a tiering gap."""

    start: int
    end: int

    def as_list(self) -> list[int]:
        return [self.start, self.end]


def first_served_offset(first_finished: int | None, global_start: int | None, remote_start: int | None) -> int | None:
    """The first offset the remote tier serves: the first its finished segments' epochs cover
    (``first_finished``), bounded below by the global log start (a DeleteRecords applied through
    the platform may have moved it inside that segment). Without finished segments: the recorded
    remote log start, if any."""
    if first_finished is None:
        return remote_start
    return first_finished if global_start is None else max(first_finished, global_start)


def remote_only_offsets(remote_start: int | None, remote_end: int, local_log_start: int) -> OffsetRange | None:
    """The offsets readable from the remote tier only: from the first offset it serves
    (``remote_start``, None: nothing tiered) up to the last tiered one (``remote_end``), below the
    broker's local log start. None when the broker still holds every tiered offset."""
    if remote_start is None:
        return None
    end = min(remote_end, local_log_start - 1)
    return OffsetRange(remote_start, end) if remote_start <= end else None


def merge_offset_ranges(ranges: Iterable[tuple[int, int]]) -> list[OffsetRange]:
    """Overlapping or adjacent inclusive ranges joined, in offset order.

    A gap seen again by a later run (the broker's log start having moved further) is recorded as
    a new, wider range; users want the offsets lost, not the history of sightings.
    """
    merged: list[OffsetRange] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1].end + 1:
            last = merged[-1]
            merged[-1] = OffsetRange(last.start, max(last.end, end))
        else:
            merged.append(OffsetRange(start, end))
    return merged


def first_uncovered(start: int, merged: Iterable[OffsetRange]) -> int:
    """The first offset from ``start`` on outside the ``merged`` ranges (``merge_offset_ranges``:
    sorted, apart by more than one offset, so one pass suffices)."""
    for r in merged:
        if r.start <= start <= r.end:
            start = r.end + 1
    return start


def recorded_gaps(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> list[list[int]]:
    """The partition's tiering gaps as ``[start, end]`` lists (the ``gaps`` field of ``status``)."""
    return [g.as_list() for g in merge_offset_ranges((g.start, g.end) for g in store.list_gaps(tip))]


def global_log_start(remote_log_start: int | None, delete_records: int | None) -> int | None:
    """Section 10 item 1: the larger of the remote log start offset (the platform's retention moves
    it) and the highest DeleteRecords applied through the platform; None when neither is known."""
    starts = [o for o in (remote_log_start, delete_records) if o is not None]
    return max(starts) if starts else None
