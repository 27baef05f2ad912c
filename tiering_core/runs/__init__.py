"""What holds a partition's lease and writes: copy, retention, removal, rebuild, orphans."""

from __future__ import annotations
