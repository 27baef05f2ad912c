"""Narrow, named exceptions shared by every part of the platform.

Each error says what went wrong and where (file and byte position, key, partition), so that
the ``tiering`` command can print it as its one-line reason.
"""

from __future__ import annotations

from pathlib import Path


def one_line(text: object) -> str:
    """A message folded onto one line, for the one-line reason a command or app prints."""
    return " ".join(str(text).split())


class TieringError(Exception):
    """Base of every error the platform raises on purpose."""


class ConfigError(TieringError):
    """The platform configuration is invalid; the message names the key."""


class CorruptLogError(TieringError):
    """A Kafka on-disk file is malformed: names the file and the byte position."""

    def __init__(self, path: Path | str, position: int, reason: str) -> None:
        self.path = Path(path)
        self.position = position
        self.reason = reason
        super().__init__(f"{self.path}: at byte {position}: {reason}")


class InvalidTopicError(TieringError):
    """A topic name or partition directory name is not one Kafka could have made."""


class TieringGapError(TieringError):
    """The broker deleted data before it was tiered; raised after copying what remains.

    ``result`` carries what the run did, so callers can still report it.
    """

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class ClusterUnreachableError(TieringError):
    """The ``kafka:`` section's cluster cannot be asked (it did not answer, kafka-python is not
    installed, the SASL password's environment variable is not set): a run never falls back to the
    files."""


class NoRemoteDataError(TieringError):
    """A process that serves no broker (it reads the metadata store alone) was asked about a
    partition the store holds no live remote data of."""

    def __init__(self, partition: object) -> None:
        super().__init__(f"partition {partition} has no remote data (unknown to the metadata store)")


class PartitionNotInLogDirsError(TieringError):
    """The broker's log dirs hold no directory of the partition (deleted, moved, or a lost disk):
    a reader may still serve what the remote tier holds of it."""

    def __init__(self, partition: object) -> None:
        super().__init__(f"partition {partition} is not in the log dirs")


class ExportError(TieringError):
    """An export cannot go on (no ``export`` section, an unreachable catalog, a table that cannot
    be created, an unwritable warehouse, a failed commit): one line naming what."""


class StoreBindingError(TieringError):
    """The metadata store may not write under the configured prefix: the prefix is bound to
    another store, or the store is empty while the prefix holds finished segments, or a recovery
    into the store is unfinished (``engine.binding``). Nothing was written or deleted."""
