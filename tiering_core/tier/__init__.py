"""Read-only joins of a broker's log with the metadata: the tier view and status rows."""

from __future__ import annotations
