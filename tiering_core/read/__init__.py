"""Serving the remote tier read-only: reader, index cache, restore, verify."""

from __future__ import annotations
