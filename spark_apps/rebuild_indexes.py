"""Rebuild indexes from the ``.log`` on Spark, compare with what is stored, repair what is damaged.

    spark-submit spark_apps/rebuild_indexes.py --config FILE [--topic T [--partition P] | --partitions ...]
        [--mode repair|check] [--local]

The run is the core's rebuild driver (``tiering_core.runs.rebuild.run``); this app gives it
Spark for its tasks (``runtime.SparkExecutor``). The driver holds each partition's lease;
executors download each finished remote segment's ``.log``, rebuild its offset, time and
transaction indexes and compare (``--local`` also checks the broker's own segments,
read-only). In repair mode the driver then writes COPY_SEGMENT_STARTED for a new copy of each
damaged segment, an executor uploads it with the rebuilt indexes, and the driver finishes it
and deletes the damaged attempt. Where the process serves no broker (a cluster's default-queue
worker) the selection is what the metadata store holds (``runtime.run_app``'s ``remote_only``)
and ``--local``, which needs the broker's disk, is skipped, said in one line. One line per
segment (ok / missing / differed / repaired / error) and a summary; exit 1 if damage remains.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.context import TieringContext
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_OK
from tiering_core.report.lines import event_line
from tiering_core.report.results import format_index_check, format_rebuild_summary
from tiering_core.runs.rebuild import IndexStatus, RebuildReport, rebuild_indexes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tiering_core.kafka.topic import TopicIdPartition, TopicPartition

APP = "rebuild_indexes"
MAX_NAMED = 20  # unresolved segments named on stderr, one line each


@dataclass
class Report(RebuildReport):
    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FAILURE


def run_rebuild(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition | TopicIdPartition],
    spark: SparkSession,
    *,
    repair: bool = True,
    local: bool = False,
    run_id: str | None = None,
    parallelism: int | None = None,
    say: Callable[[str], None] = runtime.say,
) -> Report:
    """The core's rebuild driver with its tasks on Spark; a line per event, the summary last."""
    done = rebuild_indexes(
        ctx,
        partitions,
        runtime.SparkExecutor(  # a repair uploads: its tasks share the copy quota
            spark.sparkContext, ctx.config.remote, parallelism, copy_quota=ctx.storage.quotas.copy if repair else None
        ),
        repair=repair,
        local=local,
        run_id=run_id or f"spark-{uuid.uuid4().hex}",
        events=lambda event: say(event_line(event)),
    )
    say(format_rebuild_summary(done.results, done.seconds))
    return Report(done.results, done.seconds, done.failures)


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


def rebuild(app: runtime.AppRun) -> int:
    args = app.args
    report = run_rebuild(
        app.ctx,
        app.selected,
        app.spark,
        repair=args.mode == "repair",
        local=args.local == "yes",
        run_id=args.run_id,
        parallelism=args.parallelism,
    )
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


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return runtime.run_app(APP, argv, spark, build_parser, rebuild, remote_only=True)


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.rebuild_indexes import main as app_main

    sys.exit(app_main())
