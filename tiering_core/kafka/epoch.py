"""Leader epochs: the epoch cache and the lineage check (the ``leader-epoch-checkpoint`` codec is in
``checkpoints``).

The cache mirrors Kafka's ``LeaderEpochFileCache`` (storage module) as an immutable value:
every change returns a new cache, so a view of the broker's cache can be copied, truncated and
compared without side effects. docs/kafka-rules.md sections 3, 6 and 10 are the rules followed.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, order=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


# --- the cache -----------------------------------------------------------------------------------


class LeaderEpochCache:
    """An immutable, ordered list of (epoch, start offset); every operation returns a new cache.

    Invariant (checked on construction): epochs strictly increase, start offsets never decrease,
    and both are non-negative. Construction is linear in the number of entries (a checkpoint may
    hold a million) and lookups logarithmic; the filtered view ``without_empty_epochs`` is
    computed once per cache, not once per lineage check.
    """

    __slots__ = ("_entries", "_epochs", "_starts", "_without_empty")

    def __init__(self, entries: Sequence[EpochEntry] | Iterator[EpochEntry] = ()) -> None:
        ordered = tuple(entries)
        for entry in ordered:
            if entry.epoch < 0 or entry.start_offset < 0:
                raise ValueError(f"invalid leader epoch entry {entry}")
        for prev, cur in pairwise(ordered):
            if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
                raise ValueError(f"leader epoch entries out of order: {prev} then {cur}")
        self._entries = ordered
        self._epochs = tuple(e.epoch for e in ordered)
        self._starts = tuple(e.start_offset for e in ordered)
        self._without_empty: LeaderEpochCache | None = None

    @classmethod
    def of(cls, mapping: Mapping[int, int]) -> LeaderEpochCache:
        """From ``{epoch: start_offset}`` (the shape of segment leader epochs)."""
        return cls([EpochEntry(e, o) for e, o in sorted(mapping.items())])

    # value behaviour

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __iter__(self) -> Iterator[EpochEntry]:
        return iter(self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaderEpochCache) and other._entries == self._entries

    def __hash__(self) -> int:
        return hash(self._entries)

    def __repr__(self) -> str:
        return "LeaderEpochCache({" + ", ".join(f"{e.epoch}: {e.start_offset}" for e in self._entries) + "})"

    def __contains__(self, epoch: object) -> bool:
        return epoch in self._epochs

    def as_dict(self) -> dict[int, int]:
        return dict(zip(self._epochs, self._starts, strict=True))

    # lookups

    def epochs(self) -> list[int]:
        return list(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_epoch(self) -> int | None:
        return self._epochs[0] if self._epochs else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def start_offset_of(self, epoch: int) -> int | None:
        i = bisect_left(self._epochs, epoch)
        return self._starts[i] if i < len(self._epochs) and self._epochs[i] == epoch else None

    def next_entry_after(self, epoch: int) -> EpochEntry | None:
        """The entry with the smallest epoch > ``epoch`` (``higherEntry``)."""
        i = bisect_right(self._epochs, epoch)
        return self._entries[i] if i < len(self._entries) else None

    def floor_entry(self, epoch: int) -> EpochEntry | None:
        """The entry with the greatest epoch <= ``epoch`` (``floorEntry``)."""
        i = bisect_right(self._epochs, epoch)
        return self._entries[i - 1] if i > 0 else None

    def previous_entry(self, epoch: int) -> EpochEntry | None:
        """The entry with the greatest epoch < ``epoch`` (``lowerEntry``)."""
        i = bisect_left(self._epochs, epoch)
        return self._entries[i - 1] if i > 0 else None

    def previous_epoch(self, epoch: int) -> int | None:
        """The greatest epoch < ``epoch`` (Kafka's ``previousEpoch(epoch)``)."""
        entry = self.previous_entry(epoch)
        return entry.epoch if entry is not None else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest epoch > ``epoch`` (Kafka's ``nextEpoch(epoch)``)."""
        entry = self.next_entry_after(epoch)
        return entry.epoch if entry is not None else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the last entry whose start offset <= ``offset`` (docs/kafka-rules.md section 3).

        Kafka's ``epochForOffset`` differs only for empty epochs: for an offset equal to several
        entries' start it returns the first of them. The offset's records belong to the last
        one (the earlier epochs wrote nothing), so the last is returned here.
        """
        i = bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i > 0 else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``LeaderEpochFileCache.endOffsetFor``: (floor epoch, end offset) of ``epoch``.

        Branches, in Kafka's order:
        - ``epoch`` is UNDEFINED_EPOCH: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        - ``epoch`` is the latest epoch: (epoch, log_end_offset);
        - no epoch above ``epoch`` (above every epoch, or an empty cache): (UNDEFINED_EPOCH,
          UNDEFINED_EPOCH_OFFSET);
        - no epoch <= ``epoch`` (below every epoch; its data is gone): (epoch, start of the
          first epoch above it). Kafka's javadoc speaks of UNDEFINED_EPOCH_OFFSET here, but its
          code answers this, and the code is followed;
        - otherwise: (floor epoch, start of the next higher epoch).
        """
        if epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == epoch:
            return epoch, log_end_offset
        higher = self.next_entry_after(epoch)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = self.floor_entry(epoch)
        if floor is None:
            return epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    # changes (each returns a new cache)

    def truncate_from_start(self, offset: int) -> LeaderEpochCache:
        """Kafka's ``truncateFromStartAsyncFlush``: the log now starts at ``offset``.

        Entries with start <= offset are dropped and the last dropped one comes back starting
        at ``offset`` (so the epoch holding ``offset`` is kept); nothing dropped, nothing changes.
        """
        i = bisect_right(self._starts, offset)
        if i == 0:
            return self
        return LeaderEpochCache([EpochEntry(self._epochs[i - 1], offset), *self._entries[i:]])

    def truncate_from_end(self, offset: int) -> LeaderEpochCache:
        """Kafka's ``truncateFromEndAsyncFlush``: drop entries with start >= ``offset``.

        As in Kafka, a negative ``offset`` changes nothing.
        """
        if offset < 0:
            return self
        i = bisect_left(self._starts, offset)
        return self if i == len(self._entries) else LeaderEpochCache(self._entries[:i])

    def entries_in_range(self, start_offset: int, end_offset: int) -> LeaderEpochCache:
        """Kafka's ``epochEntriesInRange``: truncated from start at ``start_offset`` (when >= 0)
        and from end at ``end_offset`` (exclusive)."""
        cache = self.truncate_from_start(start_offset) if start_offset >= 0 else self
        return cache.truncate_from_end(end_offset)

    def segment_leader_epochs(self, base_offset: int, next_base_offset: int) -> dict[int, int]:
        """The epochs of segment [base, nextBase) and where each starts within it (docs/kafka-rules.md section 3)."""
        return self.entries_in_range(base_offset, next_base_offset).as_dict()

    def leader_epoch_index_for_segment(self, next_base_offset: int) -> LeaderEpochCache:
        """The leader-epoch index uploaded with a segment: the whole cache truncated at nextBase."""
        return self.truncate_from_end(next_base_offset)

    def without_empty_epochs(self) -> LeaderEpochCache:
        """For consecutive entries with equal start offsets keep only the later epoch.

        Kafka's ``buildFilteredLeaderEpochMap``: an epoch whose successor starts at the same
        offset wrote no records, so it cannot be the epoch of any remote data. Computed once per
        cache (every lineage check asks for it).
        """
        if self._without_empty is None:
            kept: list[EpochEntry] = []
            for e in self._entries:
                if kept and kept[-1].start_offset == e.start_offset:
                    kept[-1] = e
                else:
                    kept.append(e)
            self._without_empty = self if len(kept) == len(self._entries) else LeaderEpochCache(kept)
        return self._without_empty

    def assign(self, epoch: int, start_offset: int) -> LeaderEpochCache:
        """A leader epoch starting at ``start_offset``, as ``LeaderEpochFileCache.assign``.

        - Nothing changes when ``epoch`` is the latest epoch and ``start_offset`` is not below
          its start (an epoch, once assigned, keeps its first offset).
        - Otherwise every entry with epoch >= ``epoch`` or start >= ``start_offset`` is removed
          (Kafka's ``maybeTruncateNonMonotonicEntries``) and the new entry appended.
        - A negative epoch or offset is rejected (Kafka's IllegalArgumentException).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {EpochEntry(epoch, start_offset)}")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return self
        # Entries are ordered, so those surviving the predicate are exactly a prefix.
        kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
        return LeaderEpochCache([*kept, EpochEntry(epoch, start_offset)])

    def with_entry(self, epoch: int, start_offset: int) -> LeaderEpochCache:
        """Same as :meth:`assign`."""
        return self.assign(epoch, start_offset)


# --- lineage ---------------------------------------------------------------------------------------


def _filtered_epochs(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``buildFilteredLeaderEpochMap`` over (epoch, start) pairs sorted by epoch, order not checked."""
    kept: list[tuple[int, int]] = []
    for epoch, start in pairs:
        if kept and kept[-1][1] == start:
            kept[-1] = (epoch, start)
        else:
            kept.append((epoch, start))
    return kept


def is_segment_in_lineage(
    segment_epochs: Mapping[int, int], segment_end_offset: int, lineage: LeaderEpochCache, log_end_offset: int
) -> bool:
    """Whether a remote segment lies within lineage L (docs/kafka-rules.md section 6, the lineage check).

    Follows Kafka's ``RemoteLogManager.isRemoteSegmentWithinLeaderEpochs`` and the section's
    wording clause by clause. Both the segment's epochs S and L are taken with empty epochs
    removed (Kafka filters S itself and is handed a filtered L; filtering L again here is
    idempotent and keeps callers from having to remember). An empty S or L is never within a
    lineage (Kafka would fail on it).
    """
    if not segment_epochs or not lineage:
        return False
    seg = _filtered_epochs(sorted(segment_epochs.items()))
    lin = lineage.without_empty_epochs()
    first_l, last_l = lin.entries[0].epoch, lin.entries[-1].epoch
    seg_last_epoch = seg[-1][0]
    # Clause 1: S's last epoch outside [first(L), last(L)].
    if seg_last_epoch < first_l or seg_last_epoch > last_l:
        return False
    # Clause 2: first = smallest epoch of S >= first(L); S's epochs below it are older history
    # that L has truncated from its start (overlapping re-uploads keep them).
    first = min(e for e, _ in seg if e >= first_l)
    tail = [(e, o) for e, o in seg if e >= first]
    for i, (epoch, offset) in enumerate(tail):
        # Clause 3: every epoch from `first` on must be in L.
        lineage_start = lin.start_offset_of(epoch)
        if lineage_start is None:
            return False
        # Clause 4: `first` may begin anywhere in its epoch only when it is L's first epoch
        # (L was truncated from the start there); otherwise not before L's start for it.
        if epoch == first and lin.previous_entry(epoch) is not None and offset < lineage_start:
            return False
        following = lin.next_entry_after(epoch)
        if epoch == seg_last_epoch:
            # Clause 5: the last epoch must end before L's next epoch starts.
            if following is not None and segment_end_offset > following.start_offset - 1:
                return False
        elif following is None or (following.epoch, following.start_offset) != tail[i + 1]:
            # Clause 6: between epochs, S's next (epoch, start) must be L's next (epoch, start).
            return False
    # Clause 7: the segment must end below the log end offset.
    return segment_end_offset < log_end_offset


def merge_lineage(recorded: Sequence[EpochEntry], current: Sequence[EpochEntry]) -> LeaderEpochCache:
    """docs/kafka-rules.md section 10 item 2: the recorded epoch history overridden by the broker's current cache.

    From the current cache's first start offset on, the current cache wins (it reflects
    truncations after unclean elections). Before it, recorded entries survive when their epoch
    is also below the current cache's first epoch (epochs only grow, so a recorded entry with a
    higher epoch belongs to a history the broker no longer has). When the current cache's first
    epoch was recorded with an earlier start (the broker truncated its cache from the start, so
    its first entry starts at its local log start) the earlier start is kept. Either side empty:
    the other. Both inputs must be ordered caches (``ValueError`` otherwise).
    """
    recorded_cache = LeaderEpochCache(recorded)
    current_cache = LeaderEpochCache(current)
    if not current_cache:
        return recorded_cache
    if not recorded_cache:
        return current_cache
    head = current_cache.entries[0]
    kept = [e for e in recorded_cache if e.start_offset < head.start_offset and e.epoch < head.epoch]
    recorded_start = recorded_cache.start_offset_of(head.epoch)
    if recorded_start is not None and recorded_start < head.start_offset:
        head = EpochEntry(head.epoch, recorded_start)
    return LeaderEpochCache([*kept, head, *current_cache.entries[1:]])


def is_cache_behind(recorded: Sequence[EpochEntry], current: Sequence[EpochEntry]) -> bool:
    """Whether a broker's cache is behind the recorded lineage: its latest epoch is below the
    recorded latest one. Such a broker has not seen the later leaders (a stopped, killed or
    lagging replica: followers learn an epoch only from the batches they fetch), so its cache
    reflects no truncation, only staleness; a killed leader's cache still runs its last epoch on
    over records that an unclean election has since cut from the lineage."""
    if not recorded or not current:
        return False
    return max(e.epoch for e in current) < max(e.epoch for e in recorded)


def current_lineage(recorded: Sequence[EpochEntry], current: Sequence[EpochEntry]) -> LeaderEpochCache:
    """docs/kafka-rules.md section 10 item 2 for a broker's cache as it is found: ``merge_lineage``,
    unless that cache is behind the recorded lineage (``is_cache_behind``), which then stands as
    recorded. Epochs only grow and every truncation after an unclean election comes with an epoch
    above the history it drops, so a cache behind the record has nothing newer to tell."""
    if is_cache_behind(recorded, current):
        return LeaderEpochCache(recorded)
    return merge_lineage(recorded, current)
