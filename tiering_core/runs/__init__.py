"""What holds a partition's lease and writes: copy, retention, removal, rebuild, rewrite, recover,
orphans, DeleteRecords; the machinery they share is ``tiering_core.engine``'s."""

from __future__ import annotations
