"""The trigger behind the deferrable sensor."""

from __future__ import annotations
