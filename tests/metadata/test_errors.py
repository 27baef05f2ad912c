"""The metadata store's errors: each is a ``TieringError`` (the command's one-line reason); a state
change refused names the subject and both states; a topic id claimed under another topic's name
is refused naming the id and both names; bad segment metadata and an unknown broker are also
``ValueError`` for callers validating input."""

from __future__ import annotations

import pytest

from tiering_core.errors import TieringError
from tiering_core.metadata import errors
from tiering_core.metadata.errors import (
    InvalidStateTransitionError,
    MetadataStoreError,
    TopicIdConflictError,
    check_topic_name,
)

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def test_a_refused_state_change_names_its_subject_and_both_states() -> None:
    refused = InvalidStateTransitionError("segment 7f3c of orders-0", "COPY_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED")
    assert (refused.subject, refused.current, refused.new) == (
        "segment 7f3c of orders-0",
        "COPY_SEGMENT_STARTED",
        "DELETE_SEGMENT_FINISHED",
    )
    message = str(refused)
    assert message.startswith("segment 7f3c of orders-0: ")
    assert message.index("COPY_SEGMENT_STARTED") < message.index("DELETE_SEGMENT_FINISHED")


def test_a_topic_id_claimed_under_another_name_is_refused_naming_both() -> None:
    check_topic_name(TOPIC_ID, "orders", "orders")  # its own name: no error
    with pytest.raises(TopicIdConflictError) as refused:
        check_topic_name(TOPIC_ID, "orders", "orders.v2")
    conflict = refused.value
    assert (conflict.topic_id, conflict.stored, conflict.claimed) == (TOPIC_ID, "orders", "orders.v2")
    message = str(conflict)
    assert TOPIC_ID in message and "'orders'" in message and "'orders.v2'" in message
    assert "partition.metadata" in message and "\n" not in message
    assert isinstance(conflict, MetadataStoreError)


def test_a_topic_name_differing_only_in_case_is_another_topic() -> None:
    with pytest.raises(TopicIdConflictError):
        check_topic_name(TOPIC_ID, "orders", "Orders")


@pytest.mark.parametrize("error", [errors.InvalidSegmentMetadataError, errors.UnknownBrokerError])
def test_bad_input_is_also_a_value_error(error: type[TieringError]) -> None:
    with pytest.raises(ValueError, match="broker -1"):
        raise error("broker -1")


@pytest.mark.parametrize(
    "error",
    [
        errors.DuplicateSegmentError,
        errors.PartitionNotEmptyError,
        errors.SchemaBehindError,
        errors.SchemaAheadError,
    ],
)
def test_the_stores_own_failures_are_metadata_store_errors(error: type[TieringError]) -> None:
    assert issubclass(error, MetadataStoreError) and issubclass(error, TieringError)


@pytest.mark.parametrize("error", [errors.FencedError, errors.LeaseHeldError, errors.PartitionDeletedError])
def test_a_refusal_of_the_writer_is_not_a_failure_of_the_store(error: type[TieringError]) -> None:
    assert issubclass(error, TieringError) and not issubclass(error, MetadataStoreError)
