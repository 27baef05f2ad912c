"""A removal's targets: forcing it removes the topic ids another broker reports, keeps the ones the
broker's own log dirs hold, and leaves targets nobody reported as they are."""

from __future__ import annotations

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.runs.removal_targets import RemovalTargets

TP = TopicPartition("orders", 0)
OLD = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAA", TP)
GONE = TopicIdPartition("BBBBBBBBBBBBBBBBBBBBBB", TP)
ELSEWHERE = TopicIdPartition("CCCCCCCCCCCCCCCCCCCCCC", TP)
LIVE = TopicIdPartition("DDDDDDDDDDDDDDDDDDDDDD", TP)


def test_forcing_removes_what_other_brokers_report_and_keeps_the_local_log_dirs_topic_ids() -> None:
    targets = RemovalTargets(
        TP,
        remove=(OLD,),
        removed=(GONE,),
        kept=(ELSEWHERE, LIVE),
        reported={ELSEWHERE.topic_id: "broker 2 at 2026-11-30T02:00:00Z"},
    )
    forced = targets.forced()
    assert forced.topic_partition == TP
    assert forced.remove == (OLD, ELSEWHERE)
    assert forced.removed == (GONE,)
    assert forced.kept == (LIVE,)
    assert dict(forced.reported) == {}  # nothing reported is left among what is kept
    assert targets.kept == (ELSEWHERE, LIVE)  # the unforced targets are unchanged


def test_forcing_targets_nobody_reported_changes_nothing() -> None:
    targets = RemovalTargets(TP, remove=(OLD,), removed=(), kept=(LIVE,))
    assert targets.forced() is targets
    assert targets.forced().kept == (LIVE,)


def test_a_report_of_a_topic_id_not_kept_removes_nothing_more() -> None:
    targets = RemovalTargets(TP, remove=(OLD,), removed=(), kept=(LIVE,), reported={GONE.topic_id: "broker 1"})
    forced = targets.forced()
    assert (forced.remove, forced.kept) == ((OLD,), (LIVE,))
