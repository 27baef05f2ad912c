"""What a manifest says of its segment beyond its objects (``SegmentFacts``, the manifest's
``segment``): what the metadata store records, so that ``tiering recover`` rebuilds the store from
the bucket. Kafka's bounds on offsets, timestamps and epochs, and the typed field getter every
document of the bucket is parsed with, live here too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from tiering_core.kafka.epoch import EpochEntry
from tiering_core.storage.errors import ManifestError

#: Kafka's offsets, timestamps and leader epochs: int64, int64 and int32.
MAX_OFFSET = 2**63 - 1
MAX_EPOCH = 2**31 - 1
MIN_TIMESTAMP = -(2**63)
#: At most this many entries in a manifest's leader epochs and in its leader-epoch index (each
#: takes at most 65 bytes of the manifest: 6.5 MB, a tenth of what a manifest may hold).
MAX_EPOCH_ENTRIES = 100_000

F = TypeVar("F")


def manifest_field(doc: dict[str, Any], name: str, kind: type[F], what: str = "manifest field") -> F:
    """``doc[name]`` if it is a ``kind`` (an int never a bool), else a ManifestError naming the field."""
    value = doc.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"{what} {name!r} must be {kind.__name__}, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class SegmentFacts:
    """What the metadata store records of a segment that its objects do not say: the end offset
    (inclusive), the max timestamp, the leader epochs (epoch, first offset of the epoch in the
    segment; what ``RemoteLogSegmentMetadata.leader_epochs`` holds, by ascending epoch) and the
    leader-epoch index the copy uploaded as the ``leader-epoch-checkpoint`` object (the recorded
    lineage truncated at the next segment's base, merged into the store's lineage at finish).

    The start offset is the manifest's ``base_offset``, the size its log entry's ``size``, the
    checksums and digest the manifest itself. ``validate`` holds the writer and every reader to
    the same rules, so no copy writes what a reader would refuse.
    """

    end_offset: int
    max_timestamp: int
    leader_epochs: tuple[EpochEntry, ...]
    epoch_index: tuple[EpochEntry, ...] = ()

    def validate(self, base_offset: int) -> None:
        """ManifestError naming the first problem of these facts for a segment at ``base_offset``."""
        if not base_offset <= self.end_offset <= MAX_OFFSET:
            raise ManifestError(
                f"manifest segment end_offset {self.end_offset} is outside [{base_offset}, {MAX_OFFSET}]"
            )
        if not MIN_TIMESTAMP <= self.max_timestamp <= MAX_OFFSET:
            raise ManifestError(f"manifest segment max_timestamp {self.max_timestamp} is not a 64-bit integer")
        if not self.leader_epochs:
            raise ManifestError("manifest segment leader_epochs is empty (every segment has at least one)")
        for name, entries in (("leader_epochs", self.leader_epochs), ("epoch_index", self.epoch_index)):
            if len(entries) > MAX_EPOCH_ENTRIES:
                raise ManifestError(
                    f"manifest segment {name} has {len(entries)} entries, more than the {MAX_EPOCH_ENTRIES} "
                    "a manifest holds"
                )
            previous: EpochEntry | None = None
            for index, entry in enumerate(entries):
                if not 0 <= entry.epoch <= MAX_EPOCH or not 0 <= entry.start_offset <= MAX_OFFSET:
                    raise ManifestError(
                        f"manifest segment {name}[{index}]: epoch {entry.epoch} or start offset "
                        f"{entry.start_offset} is out of range"
                    )
                if previous is not None and (
                    entry.epoch <= previous.epoch or entry.start_offset < previous.start_offset
                ):
                    raise ManifestError(
                        f"manifest segment {name}[{index}]: epoch {entry.epoch} at {entry.start_offset} does not "
                        f"follow epoch {previous.epoch} at {previous.start_offset} (epochs must increase, start "
                        "offsets must not decrease)"
                    )
                previous = entry
        for entry in self.leader_epochs:
            if not base_offset <= entry.start_offset <= self.end_offset:
                raise ManifestError(
                    f"manifest segment leader epoch {entry.epoch} starts at {entry.start_offset}, outside the "
                    f"segment {base_offset}..{self.end_offset}"
                )

    def to_doc(self) -> dict[str, Any]:
        return {
            "end_offset": self.end_offset,
            "max_timestamp": self.max_timestamp,
            "leader_epochs": [[e.epoch, e.start_offset] for e in self.leader_epochs],
            "epoch_index": [[e.epoch, e.start_offset] for e in self.epoch_index],
        }

    @classmethod
    def from_doc(cls, raw: object) -> SegmentFacts:
        """The ``segment`` object of a manifest, its shape and types checked (a ManifestError names
        the problem); the manifest made with it validates the values (``validate``)."""
        if not isinstance(raw, dict):
            raise ManifestError(f"manifest segment must be an object, got {raw!r:.80}")
        unknown = sorted(set(raw) - _FACT_FIELDS)
        if unknown:
            raise ManifestError(f"manifest segment has unknown field(s) {', '.join(map(repr, unknown)):.200}")
        return cls(
            end_offset=manifest_field(raw, "end_offset", int, "manifest segment field"),
            max_timestamp=manifest_field(raw, "max_timestamp", int, "manifest segment field"),
            leader_epochs=_epoch_entries(raw, "leader_epochs"),
            epoch_index=_epoch_entries(raw, "epoch_index"),
        )


_FACT_FIELDS = frozenset({"end_offset", "max_timestamp", "leader_epochs", "epoch_index"})


def _epoch_entries(raw: dict[str, Any], name: str) -> tuple[EpochEntry, ...]:
    items = manifest_field(raw, name, list, "manifest segment field")
    if len(items) > MAX_EPOCH_ENTRIES:
        raise ManifestError(
            f"manifest segment {name} has {len(items)} entries, more than the {MAX_EPOCH_ENTRIES} a manifest holds"
        )
    entries = []
    for index, item in enumerate(items):
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        ):
            raise ManifestError(f"manifest segment {name}[{index}] is not an [epoch, start_offset] pair of integers")
        entries.append(EpochEntry(item[0], item[1]))
    return tuple(entries)
