"""Listing a partition's segments, and decoding segment rows into values.

A listing selects what runs look at (offsets, timestamps, sizes, states, leader epochs), not the
custom metadata (object keys, sizes and checksums of every object): on SQLite the partial index
of live segments holds all of it, so a listing of a thousand segments reads a few index pages.
Callers that need custom metadata (verify, status, rebuild, reads) ask for it, in one more query
per listing. Between calls the store keeps only a bounded memo of decoded listed segments keyed
by (segment id, state, event time, writer token): a segment's row is only ever written when it
enters a state, so a changed segment is a different key and the memo cannot serve stale data.
"""

from __future__ import annotations

import gc
import threading
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import msgspec
from sqlalchemy import Connection

from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import SegmentNotFoundError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.transactions import StoreCore, tip_params
from tiering_core.metadata.values import RemoteLogSegmentMetadata

# Decoding a listing is mostly JSON parsing; msgspec's typed decoders do it several times faster
# than the json module (and turn the epoch keys back into ints on the way).
_decode_epochs = msgspec.json.Decoder(dict[int, int]).decode
_decode_epoch_lists = msgspec.json.Decoder(list[dict[int, int]]).decode
_decode_uuids = msgspec.json.Decoder(list[uuid.UUID]).decode
_decode_custom = msgspec.json.Decoder(dict[str, Any]).decode

DEFAULT_SEGMENT_MEMO = 50_000
LISTED_PARTITIONS = 4096
IDS_PER_QUERY = 500
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STATES = {s.value: s for s in RemoteLogSegmentState}


class _CollectorPause:
    """Pauses Python's cyclic garbage collector while listings are read and decoded; counted and
    thread safe (the collector is process-wide: the first listing to start pauses it, the last
    to end resumes it).

    A listing builds thousands of objects that form no cycles (reference counting frees them).
    Collections during it only walk them and promote them to the oldest generation, whose growth
    then triggers full collections of tens of milliseconds: most of a listing's p99. Nothing is
    paused or resumed when the collector was already disabled when the first listing started,
    and the pause is short: the collector runs as usual once no listing is in progress.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                if self._resume:
                    gc.disable()
            self._depth += 1

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._resume:
                self._resume = False
                gc.enable()


collector_paused = _CollectorPause()


def _ascending(epochs: dict[int, int]) -> dict[int, int]:
    """Leader epochs in ascending epoch order (as written; PostgreSQL's JSON keeps the text)."""
    return epochs if list(epochs) == sorted(epochs) else dict(sorted(epochs.items()))


def segment_from_row(row: Sequence[Any], tip: TopicIdPartition) -> RemoteLogSegmentMetadata:
    """A row starting with SEGMENT_COLUMNS (custom metadata included) -> its value."""
    sid, _pid, start, end, max_ts, size, state, epochs_json, token, event_time, custom_json = row[:11]
    return RemoteLogSegmentMetadata(
        uuid.UUID(sid),
        tip,
        start,
        end,
        max_ts,
        _ascending(_decode_epochs(epochs_json)),
        size,
        STATES[state],
        token,
        event_time,
        _decode_custom(custom_json) if custom_json else {},
    )


class SegmentListing(StoreCore):
    """``list_segments`` and the memo of listed segments."""

    _memo_limit: int
    _memo_young: dict[tuple[Any, ...], RemoteLogSegmentMetadata]
    _memo_old: dict[tuple[Any, ...], RemoteLogSegmentMetadata]
    _listed: dict[tuple[str, int], None]  # partitions listed lately, oldest first
    _listed_limit: int
    _memo_lock: threading.Lock  # the memo's generations and the listed partitions

    def _init_listing(self, segment_memo: int, listed_partitions: int) -> None:
        self._memo_limit = max(0, segment_memo)
        self._memo_young = {}
        self._memo_old = {}
        self._listed = {}
        self._listed_limit = max(1, listed_partitions)
        self._memo_lock = threading.Lock()

    def list_segments(
        self,
        tip: TopicIdPartition,
        epoch: int | None = None,
        *,
        include_deleted: bool = False,
        custom_metadata: bool = True,
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments in any state but DELETE_SEGMENT_FINISHED (all with ``include_deleted``), sorted by
        start offset, then event time, then segment id. With ``epoch``: those whose leader epochs
        include it.

        One query, answered on SQLite from the listing index alone. ``custom_metadata=False``
        leaves the custom metadata out (None in the values): what runs that only look at offsets,
        sizes and states ask for. With it, one more query reads it for the whole listing.
        """
        query = self._q.all_listing if include_deleted else self._q.live_listing
        with collector_paused:
            with self._read() as conn:
                metas = self._decode_listing(query.rows(conn, tip_params(tip)), tip)
                if epoch is not None:
                    metas = [m for m in metas if epoch in m.leader_epochs]
                if custom_metadata:
                    metas = self._with_custom_metadata(conn, metas)
        return metas

    def finished_segments(
        self, tip: TopicIdPartition, *, custom_metadata: bool = True
    ) -> list[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments by start offset (for size/count over a lineage subset)."""
        return [s for s in self.list_segments(tip, custom_metadata=custom_metadata) if s.state == FINISHED]

    def with_custom_metadata(self, segments: Sequence[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        """``segments`` with their custom metadata as stored now, read in one query per
        IDS_PER_QUERY segments. SegmentNotFoundError for a segment no longer stored (its
        partition's metadata was dropped)."""
        with self._read() as conn:
            return self._with_custom_metadata(conn, segments)

    def _with_custom_metadata(
        self, conn: Connection, segments: Sequence[RemoteLogSegmentMetadata]
    ) -> list[RemoteLogSegmentMetadata]:
        sids = [str(s.segment_id) for s in segments]
        texts: dict[str, str] = {}
        for i in range(0, len(sids), IDS_PER_QUERY):
            chunk = sids[i : i + IDS_PER_QUERY]
            texts.update((sid, text or "") for sid, text in conn.execute(self._q.custom_by_ids, {"ids": chunk}))
        out = []
        for sid, meta in zip(sids, segments, strict=True):
            text = texts.get(sid)
            if text is None:
                raise SegmentNotFoundError(
                    f"segment {sid}: its custom metadata is no longer stored (its partition's metadata was dropped)"
                )
            out.append(replace(meta, custom_metadata=_decode_custom(text) if text else {}))
        return out

    # --- the memo ------------------------------------------------------------------------

    def _memo_get(self, key: tuple[Any, ...]) -> RemoteLogSegmentMetadata | None:
        meta = self._memo_young.get(key)
        if meta is None:
            meta = self._memo_old.get(key)
            if meta is not None:
                self._memo_put(key, meta)
        return meta

    def _memo_put(self, key: tuple[Any, ...], meta: RemoteLogSegmentMetadata) -> None:
        """Two generations: when the young one is full it becomes the old one (dropping the old)."""
        if not self._memo_limit:
            return
        with self._memo_lock:
            if len(self._memo_young) >= self._memo_limit // 2:
                self._memo_old = self._memo_young
                self._memo_young = {}
            self._memo_young[key] = meta

    def _admit(self, tip: TopicIdPartition) -> bool:
        """Memoize a partition's segments from its second listing on: a pass over many partitions
        (status) then leaves the memo alone instead of churning it (and the garbage collector)."""
        key = (tip.topic_id, tip.partition)
        with self._memo_lock:
            if key in self._listed:
                return True
            while len(self._listed) >= self._listed_limit:
                del self._listed[next(iter(self._listed))]
            self._listed[key] = None
            return False

    def _decode_listing(self, rows: Sequence[Sequence[Any]], tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Rows of LISTING_COLUMNS -> values without custom metadata, in order.

        A listing's hot path: a segment seen before in the same state is its memoized value (from
        a partition's second listing on). The others' UUIDs and leader epochs are decoded by
        msgspec in one call each.
        """
        memoize = self._admit(tip)
        found: list[RemoteLogSegmentMetadata | None] | None = None
        new_rows = rows
        if memoize:
            memo_get = self._memo_get
            found = [memo_get((r[0], r[5], r[8], r[7])) for r in rows]
            new_rows = [r for r, meta in zip(rows, found, strict=True) if meta is None]
        built: list[RemoteLogSegmentMetadata] = []
        if new_rows:
            # Both columns are JSON the store wrote (UUID text, epoch objects): joined, they decode at once.
            uuids = _decode_uuids('["' + '","'.join([r[0] for r in new_rows]) + '"]')
            all_epochs = _decode_epoch_lists("[" + ",".join([r[6] for r in new_rows]) + "]")
            states, build, append = STATES, RemoteLogSegmentMetadata, built.append
            for segment_id, epochs, (_sid, start, end, max_ts, size, state, _e, token, event_time) in zip(
                uuids, all_epochs, new_rows, strict=True
            ):
                if len(epochs) > 1:
                    epochs = _ascending(epochs)
                append(build(segment_id, tip, start, end, max_ts, epochs, size, states[state], token, event_time, None))
            if memoize and self._memo_limit:
                for r, meta in zip(new_rows, built, strict=True):
                    self._memo_put((r[0], r[5], r[8], r[7]), meta)
        if found is None:
            return built
        fresh = iter(built)
        return [meta if meta is not None else next(fresh) for meta in found]
