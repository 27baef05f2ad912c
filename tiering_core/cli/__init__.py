"""The ``tiering`` command (commands) and every human-readable format it prints (output)."""

from __future__ import annotations

from tiering_core.cli.commands import main

__all__ = ["main"]
