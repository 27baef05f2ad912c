"""The full transition tables of Kafka's segment and partition-deletion state machines.

Every (from, to) pair is tried through the store on SQLite and PostgreSQL: allowed ones land,
same-state ones change nothing, every other one raises naming both states and leaves the row
(and the history) as it was.
"""

from __future__ import annotations

import itertools

import pytest

from tests.metadata.support import segment, tip
from tiering_core.metadata.errors import InvalidStateTransitionError
from tiering_core.metadata.states import (
    PARTITION_TRANSITIONS,
    SEGMENT_TRANSITIONS,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    check_partition_transition,
    check_segment_transition,
)
from tiering_core.metadata.store import RemoteLogMetadataStore

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
# docs/kafka-rules.md section 4, written out independently of the module under test.
SEGMENT_ALLOWED = {
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
}
PARTITION_ALLOWED = {
    (None, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED),
}
# How a fresh segment reaches each state through allowed steps.
SEGMENT_PATH = {
    S.COPY_SEGMENT_STARTED: [],
    S.COPY_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED],
    S.DELETE_SEGMENT_STARTED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
    S.DELETE_SEGMENT_FINISHED: [S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED],
}
PARTITION_ORDER = [P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED]
TIP = tip("AAAAAAAAAAAAAAAAAAAAAA", "orders", 0)


def test_tables_are_kafkas() -> None:
    assert {(a, b) for a, targets in SEGMENT_TRANSITIONS.items() for b in targets} == SEGMENT_ALLOWED
    assert {(a, b) for a, targets in PARTITION_TRANSITIONS.items() for b in targets} == PARTITION_ALLOWED
    assert [s.value for s in S] == [s.name for s in S]  # Kafka's names, as stored and printed


@pytest.mark.parametrize(("current", "new"), list(itertools.product(S, S)), ids=lambda s: s.name)
def test_segment_check_alone(current: S, new: S) -> None:
    subject = "segment 42 of orders-0"
    if current == new:
        assert check_segment_transition(current, new, subject) is False
    elif (current, new) in SEGMENT_ALLOWED:
        assert check_segment_transition(current, new, subject) is True
    else:
        with pytest.raises(InvalidStateTransitionError) as err:
            check_segment_transition(current, new, subject)
        assert (err.value.current, err.value.new) == (current.value, new.value)
        assert str(err.value) == f"{subject}: invalid state transition {current.value} -> {new.value}"


@pytest.mark.parametrize(("current", "new"), list(itertools.product(S, S)), ids=lambda s: s.name)
def test_every_segment_transition_in_the_store(metadata_url: str, current: S, new: S) -> None:
    with RemoteLogMetadataStore(metadata_url) as store:
        lease = store.acquire_lease(TIP, "t", run_id="run-1")
        meta = segment(TIP, 0, 9)
        store.add_segment(meta, lease)
        for step in SEGMENT_PATH[current]:
            store.update_segment_state(meta.segment_id, step, lease)
        before = store.get_segment(meta.segment_id)
        history_before = store.state_history(meta.segment_id)
        assert before is not None and before.state == current
        if current == new:
            assert store.update_segment_state(meta.segment_id, new, lease, event_time_ms=99) == before
            assert store.get_segment(meta.segment_id) == before
            assert store.state_history(meta.segment_id) == history_before
        elif (current, new) in SEGMENT_ALLOWED:
            result = store.update_segment_state(meta.segment_id, new, lease, event_time_ms=12345)
            assert result.state == new and result.event_time == 12345
            assert store.get_segment(meta.segment_id) == result
            last = store.state_history(meta.segment_id)[-1]
            assert (last.from_state, last.to_state, last.token, last.run_id) == (
                current.value,
                new.value,
                lease.token,
                "run-1",
            )
        else:
            with pytest.raises(InvalidStateTransitionError) as err:
                store.update_segment_state(meta.segment_id, new, lease, custom_metadata={"x": 1})
            message = str(err.value)
            assert current.value in message and new.value in message
            assert str(meta.segment_id) in message and str(TIP) in message
            assert store.get_segment(meta.segment_id) == before
            assert store.state_history(meta.segment_id) == history_before


@pytest.mark.parametrize(("current", "new"), list(itertools.product([None, *P], P)), ids=str)
def test_every_partition_transition_in_the_store(metadata_url: str, current: P | None, new: P) -> None:
    with RemoteLogMetadataStore(metadata_url) as store:
        lease = store.acquire_lease(TIP, "t")
        if current is not None:
            for step in PARTITION_ORDER[: PARTITION_ORDER.index(current) + 1]:
                store.update_partition_delete_state(TIP, step, lease)
        before = store.get_partition(TIP)
        history_before = store.state_history(TIP)
        assert before is not None and before.delete_state == current
        if current == new:
            store.update_partition_delete_state(TIP, new, lease)
            assert store.state_history(TIP) == history_before
            assert store.get_partition(TIP) == before
        elif (current, new) in PARTITION_ALLOWED:
            store.update_partition_delete_state(TIP, new, lease)
            after = store.get_partition(TIP)
            assert after is not None and after.delete_state == new
            last = store.state_history(TIP)[-1]
            assert (last.from_state, last.to_state, last.segment_id) == (
                current.value if current else None,
                new.value,
                None,
            )
        else:
            with pytest.raises(InvalidStateTransitionError) as err:
                store.update_partition_delete_state(TIP, new, lease)
            assert (err.value.current, err.value.new) == (current.value if current else "NONE", new.value)
            assert str(TIP) in str(err.value)
            assert store.get_partition(TIP) == before
            assert store.state_history(TIP) == history_before


def test_partition_check_alone_names_the_missing_state() -> None:
    with pytest.raises(InvalidStateTransitionError, match=r"NONE -> DELETE_PARTITION_STARTED"):
        check_partition_transition(None, P.DELETE_PARTITION_STARTED, "partition x")
    assert check_partition_transition(None, P.DELETE_PARTITION_MARKED, "partition x") is True
