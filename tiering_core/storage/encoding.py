"""How new copies of segments are stored: format 2's chunk size, compression and encryption, as
``remote:`` configures them (docs/segment-format.md); ``RemoteStorage.copy_segment`` writes each new
copy so, and ``tiering rewrite`` copies again what is not stored so."""

from __future__ import annotations

from dataclasses import dataclass

from tiering_core.storage.config import DEFAULT_CHUNK_SIZE
from tiering_core.storage.keys import KeyRing
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import SegmentManifest


@dataclass(frozen=True)
class SegmentEncoding:
    """How new copies are stored: format 2's chunks of ``remote.chunk_size``, compressed and
    encrypted as ``remote.compression`` and ``remote.encryption`` ask (neither: each stored
    chunk is its original bytes, so the stored ``.log`` is the broker's file byte for byte)."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    compression: str = "none"
    keys: KeyRing | None = None

    @property
    def encrypts(self) -> bool:
        return self.keys is not None and self.keys.encrypts

    def stores_like(self, manifest: SegmentManifest) -> bool:
        """Whether a copy made now would store the segment as ``manifest`` says it is stored (its
        format, digests, chunk size, compression and wrapping key): a rewrite leaves such a segment
        be. Under ``auto`` any compression of the log is current, as the batches decided it."""
        if not manifest.tamper_evident:
            return False
        encrypts = self.encrypts
        if manifest.chunk_size != self.chunk_size or encrypts != (manifest.encryption is not None):
            return False
        if (
            self.keys is not None
            and manifest.encryption is not None
            and not self.keys.wraps_new_keys_like(manifest.encryption)
        ):
            return False
        wanted = "zstd" if self.compression == "auto" else self.compression
        return all(
            entry.compression == wanted or (self.compression == "auto" and kind is ObjectKind.LOG)
            for kind, entry in manifest.objects.items()
        )
