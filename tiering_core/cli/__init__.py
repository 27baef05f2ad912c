"""The ``tiering`` command (main: options and dispatch; commands: one handler per subcommand) and every
human-readable format it prints (output)."""

from __future__ import annotations

from tiering_core.cli.main import main

__all__ = ["main"]
