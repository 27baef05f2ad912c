"""Kafka's on-disk partition format: read, verify, and (for tests and restore) write it."""

from __future__ import annotations
