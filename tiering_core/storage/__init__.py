"""Remote storage (KIP-405's remote storage manager): S3 and filesystem backends."""

from __future__ import annotations
