"""Rebuild indexes from the ``.log`` on Spark, compare with what is stored, repair what is damaged.

    spark-submit spark_apps/rebuild_indexes.py --config FILE [--topic T [--partition P] | --partitions ...]
        [--mode repair|check] [--local]

The logic is ``tiering_core.runs.rebuild.run``; this app only spreads it. The driver holds each
partition's lease; executors download each finished remote segment's ``.log``, rebuild its
offset, time and transaction indexes and compare (``--local`` also checks the broker's own
segments, read-only). In repair mode the driver then writes COPY_SEGMENT_STARTED for a new
copy of each damaged segment, an executor uploads it with the rebuilt indexes, and the driver
finishes it and deletes the damaged attempt. One line per segment (ok / missing / differed /
repaired / error) and a summary; exit 1 if damage remains.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.cli.output import format_index_check, format_rebuild_summary
from tiering_core.config import RemoteConfig, load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import FencedError
from tiering_core.runs.lease import HeldPartition, renew_interval
from tiering_core.runs.rebuild import (
    IndexCheck,
    IndexStatus,
    LocalIndexTask,
    RebuildResult,
    RemoteIndexExamination,
    RemoteIndexTask,
    abandon_index_repair,
    check_local_segment,
    clean_up_before_repair,
    commit_index_repair,
    examine_remote_segment,
    hold_for_rebuild,
    local_index_tasks,
    remote_index_tasks,
    repair_task,
    start_index_repair,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tiering_core.metadata.store import Lease, RemoteLogSegmentMetadata

APP = "rebuild_indexes"
MAX_NAMED = 20  # unresolved segments named on stderr, one line each

log = logging.getLogger(__name__)


# --- executor side ---------------------------------------------------------------------------


def examine_on_executor(remote: RemoteConfig, task: RemoteIndexTask) -> RemoteIndexExamination:
    return examine_remote_segment(runtime.executor_storage(remote), task)


def check_local_on_executor(task: LocalIndexTask) -> IndexCheck:
    return check_local_segment(task)


# --- driver side -----------------------------------------------------------------------------


@dataclass
class PartitionRebuild:
    result: RebuildResult
    tip: TopicIdPartition
    held: HeldPartition | None  # None: another run holds the partition
    remote: list[RemoteIndexTask] = field(default_factory=list)
    local: list[LocalIndexTask] = field(default_factory=list)
    found: dict[int, RemoteIndexExamination] = field(default_factory=dict)


@dataclass
class Report:
    results: list[RebuildResult]
    seconds: float
    failures: list[str]

    @property
    def checks(self) -> list[IndexCheck]:
        return [c for r in self.results for c in r.checks]

    def unresolved_remote(self) -> list[IndexCheck]:
        return [c for r in self.results for c in r.unresolved if c.location == "remote"]

    @property
    def exit_code(self) -> int:
        return runtime.EXIT_FAILURE if self.failures or self.unresolved_remote() else runtime.EXIT_OK


def _failed_check(task: RemoteIndexTask | LocalIndexTask, tp: TopicPartition, error: str) -> IndexCheck:
    if isinstance(task, RemoteIndexTask):
        s = task.segment
        return IndexCheck(
            tp.topic, tp.partition, s.start_offset, s.end_offset, "remote", str(s.segment_id), error=error
        )
    end = None if task.next_base_offset is None else task.next_base_offset - 1
    return IndexCheck(tp.topic, tp.partition, task.base_offset, end, "local", None, error=error)


def run_rebuild(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition],
    spark: SparkSession,
    *,
    repair: bool = True,
    local: bool = False,
    run_id: str | None = None,
    parallelism: int | None = None,
    say: Callable[[str], None] = runtime.say,
) -> Report:
    """Check (and repair) the indexes of every finished remote segment of ``partitions`` on Spark."""
    started = time.monotonic()
    sc = spark.sparkContext
    slots = parallelism or max(1, sc.defaultParallelism)
    run = run_id or f"spark-{uuid.uuid4().hex}"
    remote = ctx.config.remote
    failures: list[str] = []
    parts: list[PartitionRebuild] = []
    check_every = renew_interval(ctx.config.metadata.lease_ms)
    hold = contextlib.ExitStack()  # every partition's lease, renewed in the background until the end

    def lease_of(part: PartitionRebuild, *, renew: bool = False) -> Lease | None:
        """The partition's lease while the run holds it (``renew``: renewed now, before a commit,
        as the repair before it may have outlasted a beat); a loss is reported once, and its
        repairs stop."""
        if part.held is None:
            return None
        if part.held.holds and (not renew or part.held.renew()):
            return part.held.lease
        failures.append(
            f"{part.tip.topic_partition}: lost the partition's lease; its repairs stopped: {part.held.lost}"
        )
        part.held = None
        return None

    def still_held() -> None:
        for part in parts:
            lease_of(part)

    repairs: list[tuple[PartitionRebuild, RemoteIndexTask, RemoteIndexExamination, RemoteLogSegmentMetadata]] = []
    repairs_handed_out = False
    try:
        for tp in partitions:
            partition_log = ctx.partition_log(tp)
            tip = TopicIdPartition(partition_log.topic_id, tp)
            interval = ctx.config.topic_config(tp.topic).index_interval_bytes
            part = PartitionRebuild(RebuildResult(tp.topic, tp.partition, repair), tip, None)
            parts.append(part)
            if local:
                part.local = local_index_tasks(partition_log, interval)
            part.held = hold_for_rebuild(ctx, tip, run, hold)
            if part.held is None:
                part.result.busy = True
                say(f"{tp}: another run holds the partition; remote indexes not checked")
                continue
            if repair:
                clean_up_before_repair(ctx, tip, part.held.lease, part.result)
            part.remote = remote_index_tasks(ctx.metadata, tip, interval)

        remote_items = [(part, task) for part in parts for task in part.remote]
        local_items = [(part, task) for part in parts for task in part.local]
        total = sum(t.segment.size_bytes for _, t in remote_items)
        say(
            f"rebuild-indexes: {len(remote_items)} remote segment(s) ({runtime.fmt_bytes(total)}) and "
            f"{len(local_items)} local segment(s) of {len(parts)} partition(s); mode {'repair' if repair else 'check'}"
        )
        # Phase 1: examine everything (nothing changes yet).
        with contextlib.closing(
            runtime.run_jobs(
                sc,
                [task for _, task in remote_items],
                lambda task: examine_on_executor(remote, task),
                slots=slots,
                describe=lambda task: (
                    f"rebuild indexes of {task.segment.topic_id_partition.topic_partition} "
                    f"segment {task.segment.start_offset}"
                ),
                on_wait=still_held,
                wait_seconds=check_every,
            )
        ) as outcomes:
            for outcome in outcomes:
                part, task = remote_items[outcome.index]
                if isinstance(outcome.result, RemoteIndexExamination):
                    part.found[outcome.index] = outcome.result
                else:
                    check = _failed_check(task, part.tip.topic_partition, outcome.error or "no result")
                    part.found[outcome.index] = RemoteIndexExamination(check)
        # Phase 2: a new copy of each damaged segment, committed as it completes. A segment
        # whose .log is not proven intact is never repaired (its check carries the error).
        still_held()
        for index, (part, task) in enumerate(remote_items):
            found = part.found[index]
            lease = lease_of(part)
            if repair and found.check.needs_repair and lease is not None:
                try:
                    attempt = start_index_repair(ctx.metadata, task.segment, lease)
                except FencedError as exc:
                    if part.held is not None:
                        part.held.lose(exc)
                    lease_of(part)
                else:
                    repairs.append((part, repair_task(task, found, attempt), found, attempt))
                    continue
            part.result.checks.append(found.check)
            say(format_index_check(found.check))
        repairs_handed_out = True
        with contextlib.closing(
            runtime.run_jobs(
                sc,
                [r[1] for r in repairs],
                lambda task: examine_on_executor(remote, task),
                slots=slots,
                describe=lambda task: (
                    f"repair indexes of {task.segment.topic_id_partition.topic_partition} "
                    f"segment {task.segment.start_offset}"
                ),
                on_wait=still_held,
                wait_seconds=check_every,
            )
        ) as outcomes:
            for outcome in outcomes:
                part, task, found, attempt = repairs[outcome.index]
                examination = outcome.result
                if not isinstance(examination, RemoteIndexExamination):
                    examination = RemoteIndexExamination(
                        _failed_check(task, part.tip.topic_partition, f"repair failed: {outcome.error}")
                    )
                # Without the lease (lost meanwhile) the repair's objects are deleted, its
                # metadata left to the new lease holder's recovery.
                lease = lease_of(part, renew=True)
                check = commit_index_repair(ctx, task.segment, attempt, found.check, examination, lease)
                part.result.checks.append(check)
                say(format_index_check(check))
        # The broker's own segments: checked, never changed.
        with contextlib.closing(
            runtime.run_jobs(
                sc,
                [task for _, task in local_items],
                check_local_on_executor,
                slots=slots,
                describe=lambda task: f"check local indexes of segment {task.base_offset} in {task.partition_dir.name}",
                on_wait=still_held,
                wait_seconds=check_every,
            )
        ) as local_outcomes:
            for outcome in local_outcomes:
                part, local_task = local_items[outcome.index]
                check = (
                    outcome.result
                    if isinstance(outcome.result, IndexCheck)
                    else _failed_check(local_task, part.tip.topic_partition, outcome.error or "no result")
                )
                part.result.checks.append(check)
                say(format_index_check(check))
    except BaseException as exc:
        # The jobs are cancelled (closing the outcomes). Repairs started but never handed out
        # are cleaned up now; those handed out are left STARTED, as a cancelled task may still
        # write for a moment: the next rebuild (or copy) run's recovery deletes them.
        if not repairs_handed_out:
            for part, _task, _found, attempt in repairs:
                try:
                    abandon_index_repair(ctx.metadata, ctx.storage, attempt, lease_of(part))
                except Exception as cleanup:  # the next run's recovery deletes it; raise the cause
                    log.warning(
                        "%s: could not clean up repair attempt %s: %s",
                        part.tip.topic_partition,
                        attempt.segment_id,
                        cleanup,
                    )
        log.debug("rebuild aborted: %s", exc)
        raise
    finally:
        hold.close()
    seconds = time.monotonic() - started
    results = []
    for part in parts:
        part.result.checks.sort(key=lambda c: (c.location != "remote", c.base_offset))
        part.result.seconds = seconds
        results.append(part.result)
    report = Report(results, seconds, failures)
    say(format_rebuild_summary(results, seconds))
    return report


# --- the app ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description="Rebuild and repair segment indexes on Spark.")
    runtime.add_common_arguments(parser)
    parser.add_argument(
        "--mode",
        choices=["repair", "check"],
        default="repair",
        help="repair (default) re-copies damaged segments; check only reports",
    )
    parser.add_argument(
        "--local",
        nargs="?",
        const="yes",
        default="no",
        choices=["yes", "no"],
        help="also check the broker's local segments (read-only)",
    )
    parser.add_argument("--parallelism", type=int, default=None, help="segments at a time (default: Spark's)")
    parser.add_argument("--run-id", default=None, help="run id recorded with the partitions' leases")
    return parser


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = build_parser().parse_args(argv)
    runtime.configure_logging(args)
    own_session = spark is None
    try:
        selection = runtime.parse_selection(args)
        config = load_config(runtime.config_path(args))
        with TieringContext.open(config) as ctx:
            partitions = selection.resolve(ctx)
            if spark is None:
                spark = runtime.spark_session("tiering-rebuild-indexes", args.master)
            report = run_rebuild(
                ctx,
                partitions,
                spark,
                repair=args.mode == "repair",
                local=args.local == "yes",
                run_id=args.run_id,
                parallelism=args.parallelism,
            )
    except (Exception, KeyboardInterrupt) as exc:
        return runtime.report_failure(APP, exc)
    finally:
        if own_session and spark is not None:
            spark.stop()
    for line in report.failures:
        runtime.fail(APP, line)
    damaged = report.unresolved_remote()
    for check in damaged[:MAX_NAMED]:  # each unresolved segment named, with what was found
        runtime.fail(APP, format_index_check(check))
    if damaged:
        kinds = sorted({c.status.value for c in damaged})
        hint = " (run with --mode repair)" if args.mode == "check" and IndexStatus.ERROR.value not in kinds else ""
        runtime.fail(APP, f"{len(damaged)} remote segment(s) still {'/'.join(kinds)}{hint}")
    local_damage = [c for c in report.checks if c.location == "local" and c.status != IndexStatus.OK]
    if local_damage:
        print(
            f"{APP}: warning: {len(local_damage)} local segment(s) with damaged indexes (the broker's files; "
            "not changed)",
            file=sys.stderr,
        )
    return report.exit_code


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.rebuild_indexes import main as _main

    sys.exit(_main())
