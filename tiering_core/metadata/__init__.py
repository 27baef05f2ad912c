"""Remote log metadata: segment and partition state machines in a SQL store, fenced by leases."""

from __future__ import annotations
