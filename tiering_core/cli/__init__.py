"""The ``tiering`` command: parsing and dispatch (main: options and dispatch; commands: one handler
per subcommand) and the embedded demo; what it prints is ``tiering_core.report``'s."""

from __future__ import annotations

from tiering_core.cli.main import main

__all__ = ["main"]
