"""One object of a remote segment streamed to a local file and checked against the CRC-32C its
copy recorded (``storage.manifest.CopyRecord``), for every driver that needs a segment's files on
disk: restore writes them into a partition directory, rewrite copies them again in the current
format."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.kafka.crc import crc32c
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.errors import RemoteObjectNotFoundError
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
    from tiering_core.metadata.store import RemoteLogSegmentMetadata
    from tiering_core.storage.remote import RemoteStorage

CHUNK = 1 << 20


def download_object(storage: RemoteStorage, segment: RemoteLogSegmentMetadata, kind: ObjectKind, target: Path) -> int:
    """Stream one object to ``target``, checking the CRC-32C recorded for it; its size, or -1 if absent."""
    expected = CopyRecord.of_segment(segment).crc(kind)
    value = size = 0
    try:
        with storage.open_stream(segment_ref(segment), kind) as source, target.open("wb") as out:
            while chunk := source.read(CHUNK):
                value = crc32c(chunk, value)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except RemoteObjectNotFoundError:
        target.unlink(missing_ok=True)
        if expected is not None:
            raise TieringError(
                f"segment {segment.segment_id}: its {kind.value} object is missing (run tiering verify)"
            ) from None
        return -1
    if expected is not None and crc_hex(value) != expected:
        raise TieringError(
            f"segment {segment.segment_id}: {kind.value} crc32c {crc_hex(value)} != {expected} recorded at copy "
            "time (run tiering verify)"
        )
    return size
