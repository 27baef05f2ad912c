"""The platform's named errors: each says what went wrong and where, on the one line a command
prints as its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiering_core.errors import (
    ClusterUnreachableError,
    ConfigError,
    CorruptLogError,
    ExportError,
    InvalidTopicError,
    NoRemoteDataError,
    PartitionNotInLogDirsError,
    StoreBindingError,
    TieringError,
    TieringGapError,
    one_line,
)


def test_one_line_folds_every_run_of_whitespace_into_one_space() -> None:
    text = "  first line\n\tsecond   line\r\n\nthird  "
    assert one_line(text) == " ".join(["first", "line", "second", "line", "third"])
    assert "\n" not in one_line(ValueError("a\nb")) and one_line(ValueError("a\nb")) == "a b"
    assert one_line("") == ""


def test_a_corrupt_log_names_its_file_and_byte_position(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000042.log"
    error = CorruptLogError(str(path), 1234, "batch length -1")
    assert (error.path, error.position, error.reason) == (path, 1234, "batch length -1")
    assert str(error) == f"{path}: at byte 1234: batch length -1"


def test_a_tiering_gap_carries_what_the_run_did() -> None:
    done = {"copied": 3}
    error = TieringGapError("offsets 10..19 deleted before tiered", done)
    assert error.result is done and str(error) == "offsets 10..19 deleted before tiered"
    assert TieringGapError("no result").result is None


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (NoRemoteDataError("orders-3"), "partition orders-3 has no remote data"),
        (PartitionNotInLogDirsError("orders-3"), "partition orders-3 is not in the log dirs"),
    ],
)
def test_a_partition_s_error_names_the_partition(error: TieringError, expected: str) -> None:
    assert str(error).startswith(expected)


@pytest.mark.parametrize(
    "kind",
    [
        ConfigError,
        CorruptLogError,
        InvalidTopicError,
        TieringGapError,
        ClusterUnreachableError,
        NoRemoteDataError,
        PartitionNotInLogDirsError,
        ExportError,
        StoreBindingError,
    ],
)
def test_every_named_error_is_a_tiering_error(kind: type[Exception]) -> None:
    """A command catches TieringError alone to print its one-line reason."""
    assert issubclass(kind, TieringError) and not issubclass(TieringError, kind)
