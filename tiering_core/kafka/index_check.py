"""Judging a broker's own index files against its ``.log`` (read-only).

A broker's own files may differ from that and still be correct (checked against Kafka's
``LogSegment``, ``LocalLog`` and ``UnifiedLog``):

- ``bytesSinceLastIndexEntry`` lives only in memory: a segment reloaded after a broker restart
  starts it at 0, and so does ``truncateTo``, so the next entry comes later than a rebuild puts it;
- a follower appends each fetched chunk of batches with one ``LogSegment.append``: its entry
  maps the chunk's last offset to the chunk's first batch (a produce request carrying several
  batches for one partition does the same on the leader);
- ``LogSegment.recover`` (after an unclean shutdown) and ``close`` (a clean one) append the final
  time-index entry to the active segment too, not only at a roll;
- ``index.interval.bytes`` is a dynamic topic config, so the spacing may change mid-segment;
- brokers before Kafka 3.8 stored the offset of the record with the largest timestamp in the
  time index, not its batch's last offset.

``check_broker_index`` tells these apart from damage: a stored index that differs from the
rebuild is ``EQUIVALENT`` when it is a valid index for the ``.log`` (every lookup through it
finds the right batch), and ``DAMAGED`` otherwise.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    iter_batch_headers,
)
from tiering_core.kafka.index import (
    NO_TIMESTAMP,
    OFFSET_ENTRY,
    TIME_ENTRY,
    OffsetIndexEntry,
    TimeIndexEntry,
    parse_offset_index,
    parse_time_index,
)


class IndexVerdict(StrEnum):
    """How a broker's index file compares with the ``.log`` it indexes."""

    IDENTICAL = "identical"  # what a rebuild gives (entry for entry on the active segment)
    EQUIVALENT = "equivalent"  # differs from a rebuild only as real brokers write it: every lookup is right
    DAMAGED = "damaged"  # a lookup through it could go wrong, or it cannot be read


@dataclass(frozen=True)
class IndexJudgement:
    """The verdict on one index file, with what differs or why it is damaged."""

    verdict: IndexVerdict
    detail: str | None = None


@dataclass(frozen=True)
class LogLayout:
    """Every batch of a ``.log``: start position, first and last offset, and the largest
    timestamp up to and including it. What index entries are checked against."""

    path: Path
    size: int
    positions: list[int]
    base_offsets: list[int]
    last_offsets: list[int]
    running_max_timestamps: list[int]

    @classmethod
    def read(cls, log_path: Path, *, valid_prefix: bool = False) -> LogLayout:
        """Walk the batch headers: ``CorruptLogError`` for a damaged ``.log``, or with
        ``valid_prefix`` (an active segment, whose last batch may be mid-write) up to the damage."""
        positions, bases, lasts, running = [], [], [], []
        top = NO_TIMESTAMP
        size = 0
        for header in iter_batch_headers(Path(log_path), strict=not valid_prefix):
            positions.append(header.position)
            bases.append(header.base_offset)
            lasts.append(header.last_offset)
            top = max(top, header.max_timestamp)
            running.append(top)
            size = header.position + header.size_in_bytes
        return cls(Path(log_path), size, positions, bases, lasts, running)

    @property
    def last_offset(self) -> int | None:
        return self.last_offsets[-1] if self.last_offsets else None

    def batch_containing(self, offset: int) -> int | None:
        """Index of the batch whose [base, last] holds ``offset``, if any."""
        i = bisect_right(self.base_offsets, offset) - 1
        return i if i >= 0 and offset <= self.last_offsets[i] else None


def _offset_index_problem(
    entries: Sequence[OffsetIndexEntry], layout: LogLayout, is_active: bool
) -> tuple[int, str] | None:
    """(entry number, reason) of the first entry a lookup could be misled by, else None.

    An entry (offset o, position p) as any broker writes it: p is where a batch starts, o is an
    offset appended from there on (the batch's last offset, or a chunk's) and lies before the
    batch of the next entry. Entries beyond what the walk saw of an active segment were added
    after it and are not judged.
    """
    end = layout.last_offset
    for i, entry in enumerate(entries):
        if is_active and entry.position >= layout.size:
            break
        b = bisect_left(layout.positions, entry.position)
        if b == len(layout.positions) or layout.positions[b] != entry.position:
            return i, f"position {entry.position} is not the start of a batch"
        if entry.offset < layout.base_offsets[b]:
            first = layout.base_offsets[b]
            return i, f"offset {entry.offset} is below the first offset {first} of the batch at {entry.position}"
        if end is None or entry.offset > end:
            return i, f"offset {entry.offset} is beyond the segment's last offset {end}"
        if i + 1 < len(entries) and not (is_active and entries[i + 1].position >= layout.size):
            following = bisect_left(layout.positions, entries[i + 1].position)
            if following < len(layout.positions) and entry.offset >= layout.base_offsets[following]:
                return i, f"offset {entry.offset} reaches into the batch of the next entry"
    return None


def _time_index_problem(
    entries: Sequence[TimeIndexEntry], layout: LogLayout, is_active: bool
) -> tuple[int, str] | None:
    """(entry number, reason) of the first entry a time lookup could be misled by, else None.

    An entry (timestamp T, offset o) as any broker writes it: o lies in the first batch whose
    max timestamp reaches T, and T is the largest timestamp up to that batch; timestamps grow.
    """
    end = layout.last_offset
    previous = NO_TIMESTAMP
    for i, entry in enumerate(entries):
        if is_active and (end is None or entry.offset > end):
            break
        if entry.timestamp <= previous:
            return i, f"timestamp {entry.timestamp} does not grow past the previous entry's {previous}"
        previous = entry.timestamp
        b = layout.batch_containing(entry.offset)
        if b is None:
            return i, f"offset {entry.offset} is in no batch of the segment"
        if layout.running_max_timestamps[b] != entry.timestamp:
            return i, (
                f"timestamp {entry.timestamp} is not the largest timestamp up to offset {entry.offset} "
                f"({layout.running_max_timestamps[b]})"
            )
        if b > 0 and layout.running_max_timestamps[b - 1] >= entry.timestamp:
            return i, f"offset {entry.offset} is not in the first batch that reaches timestamp {entry.timestamp}"
    return None


def check_broker_index(
    kind: str,
    stored: bytes,
    rebuilt: bytes,
    layout: LogLayout | Path,
    base_offset: int,
    *,
    is_active: bool,
    path: Path = Path("<memory>"),
) -> IndexJudgement:
    """Judge a broker's offset index (``kind="offset"``) or time index (``kind="time"``) of one segment.

    ``rebuilt`` is ``rebuild_indexes``' bytes for the same kind (with the same ``is_active``);
    ``layout`` the segment's ``LogLayout``, or its ``.log`` path to read one only when the
    stored file differs from the rebuild. IDENTICAL: the stored entries (up to the zero-filled
    tail of a pre-allocated file) are the rebuilt ones. EQUIVALENT: they differ, but form a valid
    index for the log (see the module docstring for why brokers write such files). DAMAGED:
    unparseable, a zero-filled tail on a closed segment (the broker trims indexes at the roll),
    or an entry a lookup could be misled by; the detail names the entry and its byte.
    """
    if kind not in ("offset", "time"):
        raise ValueError(f"index kind {kind!r} is neither 'offset' nor 'time'")
    entry_size = OFFSET_ENTRY.size if kind == "offset" else TIME_ENTRY.size
    parse = parse_offset_index if kind == "offset" else parse_time_index
    try:
        entries: Sequence[OffsetIndexEntry | TimeIndexEntry] = parse(stored, base_offset, path)
    except CorruptLogError as exc:
        return IndexJudgement(IndexVerdict.DAMAGED, str(exc))
    expected = parse(rebuilt, base_offset)
    used = len(entries) * entry_size
    if not is_active and used < len(stored):
        return IndexJudgement(
            IndexVerdict.DAMAGED,
            f"{path}: at byte {used}: zero-filled entries after the last one on a closed segment "
            "(the broker trims its indexes when the segment rolls)",
        )
    if entries == expected:
        return IndexJudgement(IndexVerdict.IDENTICAL)
    if not isinstance(layout, LogLayout):
        try:
            layout = LogLayout.read(layout, valid_prefix=is_active)
        except CorruptLogError as exc:
            return IndexJudgement(IndexVerdict.DAMAGED, f"the log cannot be walked to judge the index: {exc}")
    if kind == "offset":
        problem = _offset_index_problem(entries, layout, is_active)  # type: ignore[arg-type]
    else:
        problem = _time_index_problem(entries, layout, is_active)  # type: ignore[arg-type]
    if problem is not None:
        number, reason = problem
        return IndexJudgement(
            IndexVerdict.DAMAGED, f"{path}: at byte {number * entry_size}: {kind} index entry {number}: {reason}"
        )
    detail = f"{len(entries)} entries stored, {len(expected)} rebuilt; a valid index for the log"
    if kind == "time" and not is_active and layout.running_max_timestamps:
        top = layout.running_max_timestamps[-1]
        if top > NO_TIMESTAMP and (not entries or entries[-1].timestamp != top):  # type: ignore[union-attr]
            detail += f" without the roll's final entry for timestamp {top}"
    return IndexJudgement(IndexVerdict.EQUIVALENT, detail)
