"""Erase every record of some keys from a topic's remote tier and export tables on Spark, as ``tiering erase`` does.

    spark-submit spark_apps/erase_keys.py --config FILE --topic T (--key K ... | --key-file FILE [--key-dir DIR])
        [--key-encoding utf8|hex|base64] [--partition P[,P...] ...] [--requested-by WHO] (--yes | --dry-run) [--json]

The logic is the core's (``tiering_core.export.erase.erase_topic``); this app hands the remote
tier's partitions to Spark. The driver reads and decodes the keys (``runs.erase_keys``), resolves
the partitions the metadata store holds of the topic (``runs.erase.erasure_targets``) and
broadcasts the request once; each partition is then one Spark task that opens its own context from
the config and runs ``runs.erase.erase_target`` on it: the partition's erasure under its lease (a
plan, writing nothing, in a dry run), exactly as the command's loop does. A partition that fails
is one failure line and the others go on. After the partitions, the driver erases the topic's
export tables once (pyiceberg on the driver, as the export app commits there). The lines, the
``--json`` document and the exit code are the command's (``runs.erase_report``); no key is ever
printed, and keys never travel in argv beyond what ``--key`` is given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.errors import TieringError
from tiering_core.export.erase import erase_topic
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_OK
from tiering_core.report.output import output_for
from tiering_core.runs.erase import (
    ErasureRequest,
    ErasureResult,
    PartitionErasure,
    erase_target,
    erasure_targets,
    partition_failure,
)
from tiering_core.runs.erase_keys import KeyEncoding, decode_keys, key_file_under, read_key_file
from tiering_core.runs.erase_report import format_erasure

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tiering_core.config import PlatformConfig
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import TaskAttempt

APP = "erase_keys"


def build_parser() -> argparse.ArgumentParser:
    """``tiering erase``'s options (but ``--status``), with the apps' common ones."""
    parser = argparse.ArgumentParser(
        prog=APP, description="Erase records by key from a topic on Spark.", conflict_handler="resolve"
    )
    runtime.add_common_arguments(parser)
    parser.set_defaults(partition=None)  # the common --partition gives way to the command's repeatable one
    parser.add_argument(
        "--partition",
        type=partition_numbers,
        action="extend",
        dest="erase_partitions",
        default=None,
        help="only this partition, or a comma-separated list (repeat for several; default: every partition "
        "the tier holds; blank: none named)",
    )
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--key", action="append", dest="keys", default=None, help="a record key (repeat for several)")
    keys.add_argument("--key-file", type=Path, default=None, help="a file of record keys, one per line")
    parser.add_argument(
        "--key-dir",
        default=None,
        help="--key-file is a path relative to this directory and may not lead out of it (the erase DAG's "
        "dags.erase.key_dir)",
    )
    parser.add_argument("--key-encoding", choices=("utf8", "hex", "base64"), default="utf8", help="default utf8")
    parser.add_argument("--requested-by", default="tiering erase", help="who asked, for the audit trail")
    parser.add_argument("--dry-run", action="store_true", help="name what it would remove, write nothing")
    parser.add_argument("--yes", action="store_true", help="really erase")
    parser.add_argument("--json", action="store_true", help="the result as one JSON document on stdout")
    parser.add_argument("--parallelism", type=int, default=None, help="partitions at a time (default: Spark's)")
    return parser


def partition_numbers(text: str) -> list[int]:
    """``--partition``'s value: one partition number or a comma-separated list of them; blank (a
    templated argument left unset) names none."""
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected partition numbers separated by commas, got {text!r}") from None
    if any(n < 0 for n in numbers):
        raise argparse.ArgumentTypeError(f"a partition number is at least 0, got {text!r}")
    return numbers


def read_request(args: argparse.Namespace, selection: runtime.Selection) -> ErasureRequest:
    """The request as ``tiering erase`` builds it, refused the same way, before Spark starts."""
    if selection.partitions:
        raise runtime.AppError("--partitions: name an erasure's partitions with --partition, as tiering erase does")
    if selection.topic is None:
        raise runtime.AppError("erase needs --topic")
    if not args.keys and args.key_file is None:
        raise runtime.AppError("erase needs --key or --key-file")
    if not args.yes and not args.dry_run:
        raise runtime.AppError(
            f"refusing to erase records of {selection.topic} without --yes (use --dry-run to see what)"
        )
    encoding = KeyEncoding(args.key_encoding)
    if args.key_file is None:
        keys = decode_keys(args.keys, encoding)
    else:
        key_file = args.key_file if args.key_dir is None else key_file_under(args.key_dir, str(args.key_file))
        keys = read_key_file(key_file, encoding)
    return ErasureRequest(selection.topic, keys, tuple(args.erase_partitions or ()), args.requested_by)


def erase_on_executor(
    config: PlatformConfig, request: ErasureRequest, tip: TopicIdPartition, dry_run: bool, attempt: TaskAttempt | None
) -> PartitionErasure | str:
    """One partition's erasure in a Spark task, on a context of its own; a refusal of the core
    (``TieringError``) is its failure line, as in the command's loop."""
    from tiering_core.context import TieringContext

    try:
        with TieringContext.open(config) as ctx:
            return erase_target(ctx, tip, request, dry_run=dry_run, attempt=attempt)
    except TieringError as exc:
        return partition_failure(tip, exc)


class SparkTierErasure:
    """``runs.erase.run_erase`` with each partition a Spark task: the request broadcast once, the
    partitions in the order the command takes them, a task that fails after Spark's retries one
    failure line. Spark starts only once there are partitions to erase (a topic the tier holds
    nothing of is refused, or erased from its table alone, without it)."""

    def __init__(self, app: runtime.AppRun) -> None:
        self.app = app

    def __call__(
        self, ctx: TieringContext, request: ErasureRequest, *, dry_run: bool = False, attempt: TaskAttempt | None = None
    ) -> ErasureResult:
        targets = erasure_targets(ctx, request)
        result = ErasureResult(request.erasure_id, request.key_sha256, dry_run=dry_run)
        config = replace(ctx.config, kafka=None)  # the tasks read the tier and the store, never the cluster
        sc = self.app.spark.sparkContext
        slots = self.app.args.parallelism or max(1, sc.defaultParallelism)
        shipped = sc.broadcast(request)  # once per executor, however many keys and partitions
        try:

            def task(tip: TopicIdPartition) -> PartitionErasure | str:
                return erase_on_executor(config, shipped.value, tip, dry_run, attempt)

            done: dict[int, PartitionErasure | str] = {}
            outcomes = runtime.run_jobs(
                sc, targets, task, slots=slots, describe=lambda tip: f"erase {tip.topic_partition}"
            )
            for outcome in outcomes:
                tip = targets[outcome.index]
                if outcome.result is None:
                    done[outcome.index] = partition_failure(tip, outcome.error or "Spark task gave no result")
                else:
                    done[outcome.index] = outcome.result
        finally:
            shipped.destroy()  # the executors' copies and the driver's file of the keys, gone
        for index in range(len(targets)):
            one = done[index]
            if isinstance(one, str):
                result.failures.append(one)
            else:
                result.partitions.append(one)
        return result


def erase(app: runtime.AppRun) -> int:
    args = app.args
    out = output_for(bool(args.json))
    request = read_request(args, app.selection)  # refused before Spark starts
    tier = SparkTierErasure(app)
    result = erase_topic(app.ctx, request, dry_run=args.dry_run, attempt=runtime.task_attempt(), erase_tier=tier)
    out.result(result.to_dict(), lambda: format_erasure(result))
    for failure in result.failures:
        runtime.fail(APP, failure)
    return EXIT_FAILURE if result.failures else EXIT_OK


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return runtime.run_app(APP, argv, spark, build_parser, erase, store_selects=True)


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.erase_keys import main as app_main

    sys.exit(app_main())
