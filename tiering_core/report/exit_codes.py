"""The exit codes of the ``tiering`` command and the Spark apps, one home for both (docs/commands.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
#: A bad command line (argparse exits with it by itself).
EXIT_USAGE = 2
#: A tiering gap: the broker deleted offsets before they were tiered (the rest was copied first).
EXIT_GAP = 3
#: Interrupted (Ctrl-C, SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 130
