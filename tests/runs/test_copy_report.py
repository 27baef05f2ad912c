"""A copy run's report: one partition's result as JSON, the totals over partitions, each partition's
outcome (a failure or gap before fenced, deferred and skipped; the first problem kept), told at once
to whoever listens, and the run's summary."""

from __future__ import annotations

import json

from tiering_core.events import RunEvent
from tiering_core.events.copy import ParallelUploadFinished, PartitionCopyOutcome
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy_report import CopyResult, ParallelCopyReport

P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_a_result_is_json_safe_with_its_seconds_to_the_millisecond() -> None:
    result = CopyResult("orders", 0, segments_copied=2, bytes_copied=2048, seconds=1.23456, gaps=[[10, 19]])
    as_dict = result.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict["seconds"] == 1.235
    assert (as_dict["topic"], as_dict["partition"], as_dict["gaps"]) == ("orders", 0, [[10, 19]])


def test_totals_are_summed_over_the_partitions() -> None:
    report = ParallelCopyReport()
    report.add(CopyResult("orders", 0, segments_copied=2, bytes_copied=100, segments_cleaned_up=1))
    report.add(CopyResult("orders", 1, segments_copied=3, bytes_copied=50, fenced=True))
    report.add(CopyResult("orders", 2, deferred=True))
    assert (report.segments, report.bytes, report.cleaned_up) == (5, 150, 1)
    assert report.fenced == ["orders-1"]
    assert report.deferred == ["orders-2"]


def test_an_outcome_names_a_problem_first_then_fenced_deferred_skipped_else_copied() -> None:
    report = ParallelCopyReport()
    report.fail(P0, "orders-0: upload failed")
    report.gap(P0, "orders-0: offsets 5-9 deleted before tiering")  # a second problem: the first is kept
    assert report.failures == ["orders-0: upload failed"]
    assert report.gaps == ["orders-0: offsets 5-9 deleted before tiering"]
    failed = report.outcome(CopyResult("orders", 0, fenced=True, segments_copied=1, bytes_copied=9))
    assert (failed.outcome, failed.detail) == ("failed", "orders-0: upload failed")
    assert (failed.segments_copied, failed.bytes_copied) == (1, 9)

    report.gap(P1, "orders-1: offsets 0-4 deleted before tiering")
    gap = report.outcome(CopyResult("orders", 1, deferred=True))
    assert (gap.outcome, gap.detail) == ("gap", "orders-1: offsets 0-4 deleted before tiering")

    both = CopyResult("orders", 2, fenced=True, deferred=True, skipped_reason="not tiered")
    assert report.outcome(both).outcome == "fenced"
    deferred = CopyResult("orders", 2, deferred=True, skipped_reason="not tiered")
    assert report.outcome(deferred).outcome == "deferred"
    skipped = report.outcome(CopyResult("orders", 2, skipped_reason="remote.storage.enable is false"))
    assert (skipped.outcome, skipped.detail) == ("skipped", "remote.storage.enable is false")
    copied = report.outcome(CopyResult("orders", 2, copy_lag_segments=3, copy_lag_bytes=300))
    assert copied == PartitionCopyOutcome(TopicPartition("orders", 2), "copied", 0, 0, 3, 300, None)


def test_each_partition_is_announced_as_it_is_added() -> None:
    heard: list[RunEvent] = []
    report = ParallelCopyReport(announce=heard.append)
    report.add(CopyResult("orders", 0, segments_copied=1))
    assert [e.outcome for e in heard if isinstance(e, PartitionCopyOutcome)] == ["copied"]
    report.fail(P1, "orders-1: lease lost")
    report.add(CopyResult("orders", 1))
    assert [(e.topic_partition, e.outcome) for e in heard if isinstance(e, PartitionCopyOutcome)] == [
        (P0, "copied"),
        (P1, "failed"),
    ]
    ParallelCopyReport().add(CopyResult("orders", 0))  # nobody listening: nothing to tell, no error


def test_the_summary_counts_partitions_workers_and_each_kind_of_outcome() -> None:
    report = ParallelCopyReport(seconds=4.5, check_seconds=0.5)
    report.workers.update(["worker-1", "worker-2", "worker-1"])  # a worker of many partitions counts once
    report.add(CopyResult("orders", 0, segments_copied=2, bytes_copied=20))
    report.add(CopyResult("orders", 1, fenced=True))
    report.add(CopyResult("orders", 2, deferred=True, segments_copied=1, bytes_copied=5))
    report.fail(P0, "orders-0: one segment failed")
    report.gap(P1, "orders-1: a gap")
    assert report.finished() == ParallelUploadFinished(
        partitions=3,
        segments=3,
        bytes_copied=25,
        seconds=4.5,
        workers=2,
        failures=1,
        check_seconds=0.5,
        fenced=1,
        gaps=1,
        deferred=1,
    )
