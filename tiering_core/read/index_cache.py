"""Index files of remote segments through a cache: least recently used out first, bounded by bytes,
each entry checked against the CRC-32C the metadata recorded at copy time, so a corrupt cached or
stored index is never used (a damaged stored offset or time index only costs a scan from the
segment's start, and is logged so ``tiering rebuild-indexes`` can repair it).

On disk the cache owns one directory, ``remote-index-cache`` under the configured
``index_cache_dir`` (Kafka's name for its own), and only ever reads, replaces or evicts files it
names itself (``<segment id>.<index kind>``): whatever else lies there is never touched.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.crc import crc32c
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.chunks import ChunkError
from tiering_core.storage.errors import RemoteObjectNotFoundError
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.metadata.store import RemoteLogSegmentMetadata
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)


INDEX_KINDS = (ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX)

#: The subdirectory of ``index_cache_dir`` the cache owns.
CACHE_DIR_NAME = "remote-index-cache"

#: The names of the cache's own files: ``<segment id>.<index kind>``.
_ENTRY = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.(?:index|timeindex|txnindex)")


def cache_directory(index_cache_dir: Path | None) -> Path | None:
    """The directory the cache owns under the configured ``index_cache_dir``."""
    return None if index_cache_dir is None else index_cache_dir / CACHE_DIR_NAME


class RemoteIndexCache:
    """Index objects of remote segments, fetched once and kept up to ``max_bytes``.

    Kept in memory, or with ``directory`` (its own: see :func:`cache_directory`) as files named
    ``<segment id>.<kind>`` that outlive the process (Kafka keeps its remote index cache on disk
    too); files of other names there are never read, counted or evicted. Every entry, cached or just fetched,
    is checked against the CRC-32C the metadata recorded for it: a mismatching cached file is
    discarded and fetched again; a stored object that mismatches is reported as None (damaged).
    """

    def __init__(self, storage: RemoteStorage, max_bytes: int, directory: Path | None = None) -> None:
        if max_bytes <= 0:
            raise ValueError(f"index cache bound {max_bytes} must be positive")
        self.storage = storage
        self.max_bytes = max_bytes
        self.directory = directory
        self.hits = 0
        self.misses = 0
        self._memory: dict[str, bytes] = {}
        self._sizes: collections.OrderedDict[str, int] = collections.OrderedDict()  # LRU order, oldest first
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            files = [p for p in directory.iterdir() if _ENTRY.fullmatch(p.name) and p.is_file() and not p.is_symlink()]
            for path in sorted(files, key=lambda p: p.stat().st_mtime):
                self._sizes[path.name] = path.stat().st_size
            self._evict()

    @property
    def size_bytes(self) -> int:
        return sum(self._sizes.values())

    def get(self, segment: RemoteLogSegmentMetadata, kind: ObjectKind) -> bytes | None:
        """The segment's index of ``kind``: None when it has none, or the stored one is damaged."""
        expected = _recorded_crc(segment, kind)
        name = f"{segment.segment_id}.{kind.value}"
        if not _ENTRY.fullmatch(name):
            raise ValueError(f"segment id {segment.segment_id!r} cannot name an index cache entry")
        cached = self._load(name)
        if cached is not None:
            if expected is None or crc_hex(crc32c(cached)) == expected:
                self.hits += 1
                self._sizes.move_to_end(name)
                return cached
            log.warning("%s: cached %s of segment %s is corrupt; fetching it again", _tp(segment), kind.value, name)
            self._discard(name)
        self.misses += 1
        try:
            data = self.storage.fetch(segment_ref(segment), kind)
        except RemoteObjectNotFoundError:
            if expected is not None:
                log.warning("%s: stored %s of segment %s is missing", _tp(segment), kind.value, segment.segment_id)
            return None
        except ChunkError as exc:  # a damaged format-2 chunk: as a damaged index, a scan instead
            log.warning("%s: %s; not used (tiering rebuild-indexes repairs it)", _tp(segment), exc)
            return None
        if expected is not None and crc_hex(crc32c(data)) != expected:
            log.warning(
                "%s: stored %s of segment %s does not match its recorded checksum; not used "
                "(tiering rebuild-indexes repairs it)",
                _tp(segment),
                kind.value,
                segment.segment_id,
            )
            return None
        self._store(name, data)
        return data

    def _load(self, name: str) -> bytes | None:
        if name not in self._sizes:
            return None
        if self.directory is None:
            return self._memory[name]
        try:
            return (self.directory / name).read_bytes()
        except OSError:
            self._sizes.pop(name, None)
            return None

    def _store(self, name: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        if self.directory is None:
            self._memory[name] = data
        else:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.directory / name)
        self._sizes[name] = len(data)
        self._sizes.move_to_end(name)
        self._evict()

    def _discard(self, name: str) -> None:
        self._sizes.pop(name, None)
        self._memory.pop(name, None)
        if self.directory is not None:
            (self.directory / name).unlink(missing_ok=True)

    def _evict(self) -> None:
        total = self.size_bytes
        while total > self.max_bytes and self._sizes:
            name, size = next(iter(self._sizes.items()))
            self._discard(name)
            total -= size


def _recorded_crc(segment: RemoteLogSegmentMetadata, kind: ObjectKind) -> str | None:
    return CopyRecord.of_segment(segment).crc(kind)


def _tp(segment: RemoteLogSegmentMetadata) -> str:
    tp = segment.topic_id_partition.topic_partition
    return f"{tp.topic}-{tp.partition}"
