"""The runs' errors: every one is a ``TieringError`` (the command's one-line reason), a refused
removal carries what it found so a caller need not look again, and a deletion without proof is a
refused removal (one ``except`` handles both)."""

from __future__ import annotations

import pytest

from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.runs import errors
from tiering_core.runs.errors import DeletionUnprovenError, RemovalRefusedError
from tiering_core.runs.removal_targets import RemovalTargets

TP = TopicPartition("orders", 1)
LIVE = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAA", TP)


@pytest.mark.parametrize(
    "error",
    [
        errors.CopyFailedError,
        errors.DamagedSegmentError,
        errors.RemovalRefusedError,
        errors.DeletionUnprovenError,
        errors.RemovalRequestRefusedError,
        errors.DeleteRecordsRefusedError,
        errors.ErasureRefusedError,
    ],
)
def test_every_run_error_is_a_tiering_error_with_its_message(error: type[TieringError]) -> None:
    with pytest.raises(TieringError, match=r"^orders-1: why$"):
        raise error("orders-1: why")


def test_a_refused_removal_carries_its_targets_or_none_when_nothing_could_be_read() -> None:
    targets = RemovalTargets(TP, remove=(), removed=(), kept=(LIVE,))
    refused = RemovalRefusedError("orders-1: the broker still holds it", targets=targets)
    assert refused.targets is targets and str(refused) == "orders-1: the broker still holds it"
    assert RemovalRefusedError("orders-1: the log dirs could not be read").targets is None


def test_an_unproven_deletion_is_caught_as_a_refused_removal_with_what_forcing_deletes() -> None:
    targets = RemovalTargets(TP, remove=(LIVE,), removed=(), kept=())
    with pytest.raises(RemovalRefusedError) as refused:
        raise DeletionUnprovenError(f"orders-1: still has topic id {LIVE.topic_id}", targets=targets)
    assert isinstance(refused.value, DeletionUnprovenError)
    assert refused.value.targets == targets
