"""A line for every run event, in the words the command, the Spark apps and the Airflow tasks
always printed."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import tiering_core.events
from tiering_core.events import RunEvent
from tiering_core.events.read import SegmentRestored
from tiering_core.kafka.topic import TopicPartition
from tiering_core.report.lines import event_line


def all_event_types() -> list[type[RunEvent]]:
    for module in pkgutil.iter_modules(tiering_core.events.__path__):
        importlib.import_module(f"tiering_core.events.{module.name}")
    found: list[type[RunEvent]] = []
    pending = list(RunEvent.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.startswith("tiering_core.")]


def test_every_run_event_has_a_line_of_its_own() -> None:
    fallback = event_line.dispatch(RunEvent)
    types = all_event_types()
    assert SegmentRestored in types
    missing = [cls.__qualname__ for cls in types if event_line.dispatch(cls) is fallback]
    assert missing == []


def test_an_event_without_a_line_still_reads_by_its_fields() -> None:
    @dataclass(frozen=True)
    class Unheard(RunEvent):
        segment: int

    assert event_line(Unheard(7)) == "Unheard: segment=7"


def test_every_copy_line_reads_as_the_run_always_said_it() -> None:
    """The copy run's events read in the words the command, the Spark app and the Airflow task
    always printed (users and scripts read them)."""
    from tiering_core.events.copy import (
        CopyFinished,
        CopyNotPlanned,
        CopySkipped,
        DryRunPlanned,
        FencedWhileCopying,
        LeaseExpiredWhileCopying,
        ParallelUploadFinished,
        PartitionHeld,
        SegmentCopied,
        SegmentFailed,
        SegmentLeftUploading,
        SegmentNotFinished,
        SegmentRefused,
        SegmentVanished,
        UploadsPlanned,
        WouldCopy,
    )

    tp = TopicPartition("orders", 3)
    lines = {
        CopySkipped(tp, "remote.storage.enable is false"): "orders-3: skipped (remote.storage.enable is false)",
        CopyNotPlanned(tp, "broker 2 holds a more advanced replica (LSO 12 > 8)"): (
            "orders-3: skipped: broker 2 holds a more advanced replica (LSO 12 > 8)"
        ),
        PartitionHeld(tp): "orders-3: another copy run holds the partition; nothing done",
        SegmentCopied(tp, 100, 199, 2048, 0.5, index=2, total=5): (
            "orders-3: copied segment 100 [100..199] 2.0 KiB in 0.50 s (4.0 KiB/s) [2/5]"
        ),
        SegmentCopied(tp, 100, 199, 2048, 0.5, worker="host:41"): (
            "orders-3: copied segment 100 [100..199] 2.0 KiB in 0.50 s (4.0 KiB/s) on host:41"
        ),
        SegmentCopied(tp, 0, 4, 371, 0.0, index=1, total=1): (
            "orders-3: copied segment 0 [0..4] 371 B in 0.00 s (345.5 GiB/s) [1/1]"
        ),
        SegmentVanished(tp, 5): "orders-3: the broker deleted segment 5 while it was being copied",
        SegmentFailed(tp, 5, "SlowDown: 503"): "orders-3: segment 5 failed (SlowDown: 503); cleaned up",
        SegmentNotFinished(tp, 40): "orders-3: segment 40 not finished (an earlier segment failed); cleaned up",
        SegmentLeftUploading(tp, 40): (
            "orders-3: segment 40 was uploading when the run was aborted; left for the next run to clean up"
        ),
        FencedWhileCopying(tp, 10, "copy:run-2"): (
            "orders-3: fenced by a newer run (copy:run-2) while copying segment 10; stopped"
        ),
        LeaseExpiredWhileCopying(tp, "the partition's lease expired while copying segment 10 (why)"): (
            "orders-3: the partition's lease expired while copying segment 10 (why); stopped"
        ),
        CopyFinished(tp, 2, 3 * 1048576, 1.5, 199, 1, 2048): (
            "orders-3: copied 2 segment(s), 3.0 MiB in 1.50 s (2.0 MiB/s); highest copied offset 199, "
            "copy lag 1 segment(s) / 2.0 KiB"
        ),
        CopyFinished(tp, 0, 0, 0.0, -1, 0, 0): (
            "orders-3: copied 0 segment(s), 0 B in 0.00 s (0 B/s); highest copied offset -1, "
            "copy lag 0 segment(s) / 0 B"
        ),
        WouldCopy(tp, 100, 199, 2048): "orders-3: would copy segment 100 [100..199] 2.0 KiB",
        DryRunPlanned(tp, 2): "orders-3: dry run: 2 segment(s) would be copied",
        UploadsPlanned(
            4, 2048, 2, 3
        ): "parallel upload: 4 segment(s), 2.0 KiB of 2 partition(s) planned; 3 upload(s) at a time",
        SegmentRefused(tp, 5, "CRC mismatch"): (
            "orders-3: segment 5 not copied (CRC mismatch); the segments before it are still committed"
        ),
        ParallelUploadFinished(2, 4, 3 * 1048576, 1.5, 2, 0, 0.25, 1, 1): (
            "parallel upload: 2 partition(s), 4 segment(s), 3.0 MiB (3145728 bytes) in 1.50 s (2.0 MiB/s) on 2 "
            "executor worker(s); 0 failure(s); segment checks on the driver 0.25 s, 1 partition(s) held by another "
            "run, 1 tiering gap(s)"
        ),
        ParallelUploadFinished(1, 0, 0, 0.0, 0, 1, 0.0, 0, 0): (
            "parallel upload: 1 partition(s), 0 segment(s), 0 B (0 bytes) in 0.00 s (0 B/s) on 0 executor worker(s); "
            "1 failure(s); segment checks on the driver 0.00 s"
        ),
    }
    assert {event: event_line(event) for event in lines} == lines


def test_the_broker_s_own_indexes_skipped_where_no_log_dir_is_read_is_one_line_saying_why() -> None:
    from tiering_core.events.rebuild import LocalIndexesSkipped

    assert event_line(LocalIndexesSkipped(3)) == (
        "rebuild-indexes: local indexes of 3 partition(s) skipped: this process serves no broker (no log dir to "
        "read); the remote segments are checked"
    )
