"""The ``tiering`` command: ``tiering --config FILE <command>``.

Exit 0 on success; otherwise non-zero with a one-line reason on stderr. ``--json`` prints
machine-readable output whose field names are stable (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from tiering_core.errors import ClusterUnreachableError, TieringError, one_line
from tiering_core.events import EventSink
from tiering_core.humanize import fmt_bytes
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_GAP, EXIT_OK
from tiering_core.report.output import Output, output_for

log = logging.getLogger("tiering")

Handler = Callable[[argparse.Namespace], int]


def _emit(args: argparse.Namespace, payload: Any, human: Callable[[], str]) -> None:
    _output(args).result(payload, human)


def _output(args: argparse.Namespace) -> Output:
    return output_for(bool(args.json))


#: Commands that read the broker's log dirs: with several brokers configured they need to know
#: which one this process serves (``--broker`` or ``TIERING_BROKER_ID``). ``status --cluster``,
#: ``retention --orphans`` and ``delete-partition --lift-tombstone`` read none; nor do the other
#: commands (segments, fetch, find-offset, verify, restore, export, rebuild-indexes, rewrite,
#: replay, db), which then work on what the metadata store holds and the remote tier alone
#: (``TieringContext.selected_partitions``; ``rebuild-indexes --local`` skips the broker's files).
LOG_DIR_COMMANDS = frozenset({"status", "copy", "retention", "delete-partition", "delete-records"})
#: The flag of a log-dir command under which it reads none.
NO_LOG_DIR_FLAGS = {
    "status": ("cluster",),
    "retention": ("orphans", "delete_orphans"),
    "delete-partition": ("lift_tombstone",),
}


def reads_log_dirs(args: argparse.Namespace) -> bool:
    flags = NO_LOG_DIR_FLAGS.get(args.command, ())
    return args.command in LOG_DIR_COMMANDS and not any(getattr(args, flag, False) for flag in flags)


def _config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from tiering_core.config import load_config, select_broker

    path = args.config or os.environ.get("TIERING_CONFIG")
    if not path:
        raise TieringError("no config file: pass --config FILE or set TIERING_CONFIG")
    return select_broker(load_config(path), getattr(args, "broker", None), required=reads_log_dirs(args))


def _context(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from tiering_core.context import TieringContext

    return TieringContext.open(_config(args))


command_config, command_context = _config, _context  # for the handlers in the modules beside this one


@contextmanager
def _planning_context(args: argparse.Namespace) -> Iterator[Any]:
    """The context of a dry run, which creates no file: where the SQLite metadata store or the
    filesystem tier's root does not exist yet, an empty one in a scratch directory, removed
    afterwards (the plan then holds what a first run copies: nothing is copied yet)."""
    from tiering_core.context import TieringContext

    config = _config(args)
    with tempfile.TemporaryDirectory(prefix="tiering-dry-run-") as scratch:
        with TieringContext.open(_created_in(config, Path(scratch))) as ctx:
            yield ctx


def _created_in(config: Any, scratch: Path) -> Any:
    """``config`` with the SQLite store and the filesystem tier root that do not exist yet in ``scratch``."""
    from tiering_core.metadata.engine import sqlite_file

    database = sqlite_file(config.metadata.url)
    if database is not None and not Path(database).exists():
        config = replace(config, metadata=replace(config.metadata, url=f"sqlite:///{scratch / 'metadata.db'}"))
    root = config.remote.root
    if config.remote.backend == "filesystem" and root is not None and not Path(root).exists():
        config = replace(config, remote=replace(config.remote, root=scratch / "tier"))
    return config


def _progress(args: argparse.Namespace) -> Callable[[str], None]:
    return _output(args).progress


def _events(args: argparse.Namespace) -> EventSink:
    return _output(args).event


# --- commands -------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from tiering_core.report.tables import format_cluster_status, format_status_table
    from tiering_core.tier.status import collect_status

    if args.cluster:
        from tiering_core.tier.cluster import cluster_status

        if args.partition is not None and args.topic is None:
            raise TieringError("--partition needs --topic")
        with _context(args) as ctx:
            cluster = cluster_status(ctx, args.topic, args.partition)
        _emit(args, [row.to_dict() for row in cluster], lambda: format_cluster_status(cluster))
        return EXIT_OK
    with _context(args) as ctx:
        rows = collect_status(ctx, args.topic, args.partition, broker_id=ctx.config.broker_id)
        exported = _exported_offsets(ctx, rows)
    payload = [row.to_dict() for row in rows]
    if exported is not None:
        for offset, out in zip(exported, payload, strict=True):
            out["exported_up_to"] = offset
    _emit(args, payload, lambda: format_status_table(rows, exported))
    return EXIT_OK


def _exported_offsets(ctx: Any, rows: list[Any]) -> list[int | None] | None:
    """Per row, the highest offset the topic's export table holds of the row's topic id (None:
    no ``export`` section); an unreachable catalog is a warning, the tier's status is still shown."""
    if ctx.config.export is None:
        return None
    from tiering_core.export import exported_by_topic

    try:
        held = exported_by_topic(ctx, {row.topic for row in rows})
    except TieringError as exc:
        print(f"tiering: status: exported offsets unknown: {one_line(exc)}", file=sys.stderr)
        return [None] * len(rows)
    return [held[row.topic].up_to(row.topic_id, row.partition) if row.topic in held else None for row in rows]


def cmd_copy(args: argparse.Namespace) -> int:
    from tiering_core.errors import TieringGapError
    from tiering_core.report.summaries import format_copy_summary
    from tiering_core.runs.copy import run_copy
    from tiering_core.runs.copy_report import CopyResult

    results = []
    failures: list[str] = []
    gap = False
    partitions = 0
    with _planning_context(args) if args.dry_run else _context(args) as ctx:
        for partition_log in ctx.partitions(args.topic, args.partition):
            tp = partition_log.topic_partition
            partitions += 1
            try:
                results.append(
                    run_copy(ctx, tp, dry_run=args.dry_run, events=_events(args), broker_id=ctx.config.broker_id)
                )
            except ClusterUnreachableError:
                raise  # one line for the run, not one per partition
            except TieringGapError as exc:
                gap = True
                if isinstance(exc.result, CopyResult):
                    results.append(exc.result)
                failures.append(str(exc))
            except TieringError as exc:
                failures.append(f"{tp}: {exc}")
    _emit(args, [r.to_dict() for r in results], lambda: format_copy_summary(results, partitions, len(failures)))
    for failure in failures:
        print(f"tiering: copy failed: {failure}", file=sys.stderr)
    if gap and len(failures) == 1:
        return EXIT_GAP
    return EXIT_FAILURE if failures else EXIT_OK


def cmd_retention(args: argparse.Namespace) -> int:
    from tiering_core.report.results import format_orphans
    from tiering_core.report.summaries import format_retention, format_retention_summary, with_summary
    from tiering_core.runs.orphans import find_orphans
    from tiering_core.runs.retention import run_retention

    failures: list[str] = []
    with _context(args) as ctx:
        if args.orphans or args.delete_orphans:
            delete = args.delete_orphans and not args.dry_run
            orphans = find_orphans(ctx, args.topic, args.partition, grace_ms=args.grace_ms, delete=delete)
            _emit(
                args,
                [o.to_dict() for o in orphans],
                lambda: format_orphans(orphans),
            )
            return EXIT_OK
        results = []
        partitions = ctx.partitions(args.topic, args.partition)
        for partition_log in partitions:
            try:
                results.append(
                    run_retention(
                        ctx, partition_log.topic_partition, dry_run=args.dry_run, broker_id=ctx.config.broker_id
                    )
                )
            except ClusterUnreachableError:
                raise
            except TieringError as exc:
                failures.append(f"{partition_log.topic_partition}: {exc}")
    summary = format_retention_summary(results, len(partitions), len(failures))
    _emit(args, [r.to_dict() for r in results], lambda: with_summary(format_retention(results), summary))
    for failure in failures:
        print(f"tiering: retention failed: {failure}", file=sys.stderr)
    return EXIT_FAILURE if failures else EXIT_OK


def cmd_rewrite(args: argparse.Namespace) -> int:
    from tiering_core.report.summaries import format_rewrite, format_rewrite_summary, with_summary
    from tiering_core.runs.rewrite import run_rewrite

    failures: list[str] = []
    results = []
    with _context(args) as ctx:
        partitions = ctx.selected_partitions(args.topic, args.partition)
        for partition in partitions:
            try:
                results.append(run_rewrite(ctx, partition))
            except TieringError as exc:
                failures.append(f"{partition}: {exc}")
    summary = format_rewrite_summary(results, len(partitions), len(failures))
    _emit(args, [r.to_dict() for r in results], lambda: with_summary(format_rewrite(results), summary))
    for failure in failures:
        print(f"tiering: rewrite failed: {failure}", file=sys.stderr)
    return EXIT_FAILURE if failures else EXIT_OK


def cmd_delete_partition(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
    from tiering_core.report.results import format_partition_deletion
    from tiering_core.runs.removal import delete_partition, lift_tombstone

    tp = TopicPartition(args.topic, args.partition)
    if args.lift_tombstone:
        if args.topic_id is None or not args.yes or args.dry_run or args.force:
            raise TieringError(
                f"--lift-tombstone of {tp} needs --topic-id and --yes (and neither --dry-run nor --force)"
            )
        with _context(args) as ctx:
            lift_tombstone(ctx, TopicIdPartition(args.topic_id, tp))
        _emit(
            args,
            {"topic": args.topic, "partition": args.partition, "topic_id": args.topic_id, "tombstone_lifted": True},
            lambda: f"{tp} (topic id {args.topic_id}): tombstone lifted; the topic id may be tiered again",
        )
        return EXIT_OK
    if not args.yes and not args.dry_run:
        raise TieringError(
            f"refusing to delete all remote data of {args.topic}-{args.partition} without --yes "
            "(use --dry-run to see what would be deleted)"
        )
    with _context(args) as ctx:
        result = delete_partition(ctx, tp, topic_id=args.topic_id, dry_run=args.dry_run, force=args.force)

    _emit(args, result.to_dict(), lambda: format_partition_deletion(tp, result))
    return EXIT_FAILURE if result.fenced else EXIT_OK


def cmd_delete_records(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.report.results import format_delete_records
    from tiering_core.runs.delete_records import apply_delete_records

    if not args.yes and not args.dry_run:
        raise TieringError("refusing to delete records without --yes")
    with _context(args) as ctx:
        result = apply_delete_records(
            ctx, TopicPartition(args.topic, args.partition), args.before_offset, dry_run=args.dry_run
        )
    _emit(args, result.to_dict(), lambda: format_delete_records(result))
    return EXIT_OK


def cmd_segments(args: argparse.Namespace) -> int:
    from tiering_core.report.tables import format_segments_table
    from tiering_core.tier.status import list_remote_segments

    with _context(args) as ctx:
        rows = list_remote_segments(ctx, args.topic, args.partition)
    _emit(args, rows, lambda: format_segments_table(rows))
    return EXIT_OK


def cmd_rebuild_indexes(args: argparse.Namespace) -> int:
    import time

    from tiering_core.report.results import format_index_check, format_rebuild_summary
    from tiering_core.runs.rebuild import rebuild_partition_indexes

    started = time.monotonic()
    with _context(args) as ctx:
        result = rebuild_partition_indexes(
            ctx,
            ctx.selected_partition(args.topic, args.partition),
            repair=not args.check_only,
            local=args.local,
            events=_events(args),
        )
    summary = format_rebuild_summary([result], time.monotonic() - started)
    _emit(args, result.to_dict(), lambda: summary)
    if result.busy:
        print(f"tiering: {args.topic}-{args.partition}: another run holds the partition; try again", file=sys.stderr)
        return EXIT_FAILURE
    for check in result.unresolved:
        print(f"tiering: rebuild-indexes: {format_index_check(check)}", file=sys.stderr)
    return EXIT_FAILURE if result.unresolved else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from tiering_core.engine.executor import InProcessExecutor
    from tiering_core.export import run_export
    from tiering_core.kafka.isolation import IsolationLevel
    from tiering_core.report.results import format_export_summary

    with _context(args) as ctx:
        result = run_export(
            ctx,
            args.topic,
            args.partition,
            isolation=IsolationLevel(args.isolation),
            table=args.table,
            dry_run=args.dry_run,
            events=_events(args),
            executor=InProcessExecutor(ctx.storage),
        )
    _emit(args, result.to_dict(), lambda: format_export_summary(result))
    for failure in result.failed:
        print(f"tiering: export failed: {failure}", file=sys.stderr)
    return EXIT_FAILURE if result.failed else EXIT_OK


def cmd_fetch(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.read.reader import IsolationLevel, open_reader
    from tiering_core.report.records import RecordFormat, format_records

    if args.max_records < 1:
        raise TieringError(f"--max-records must be at least 1, got {args.max_records}")
    fmt = RecordFormat(**{f.name: getattr(args, f.name) for f in fields(RecordFormat)})  # the flags' dests
    with _context(args) as ctx:
        reader = open_reader(ctx, TopicPartition(args.topic, args.partition))
        records = reader.read(args.offset, args.max_records, IsolationLevel(args.isolation))
    _emit(args, [r.to_dict() for r in records], lambda: format_records(records, args.partition, fmt))
    return EXIT_OK


def cmd_find_offset(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.read.reader import open_reader

    with _context(args) as ctx:
        reader = open_reader(ctx, TopicPartition(args.topic, args.partition))
        found = reader.offset_for_timestamp(args.timestamp, args.from_offset)
    _emit(
        args,
        found.to_dict() if found is not None else None,
        lambda: (
            f"offset {found.offset} timestamp {found.timestamp} leader_epoch {found.leader_epoch}"
            if found is not None
            else f"no record with timestamp >= {args.timestamp} in the remote tier"
        ),
    )
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from tiering_core.engine.executor import InProcessExecutor
    from tiering_core.read.verify import partitions_to_verify, run_verify
    from tiering_core.report.results import format_verification, format_verify_summary

    with _context(args) as ctx:
        partitions = partitions_to_verify(ctx, args.topic, args.partition)
        results = run_verify(ctx, partitions, InProcessExecutor(ctx.storage), _events(args)).results
    bad = [r for r in results if not r.ok]
    _emit(args, [r.to_dict() for r in results], lambda: format_verify_summary(results))
    for r in bad:
        print(f"tiering: verify: {format_verification(r)}", file=sys.stderr)
    return EXIT_FAILURE if bad else EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.read.restore import restore_partition

    with _context(args) as ctx:
        result = restore_partition(
            ctx, TopicPartition(args.topic, args.partition), Path(args.to), events=_events(args), force=args.force
        )
    _emit(
        args,
        result.to_dict(),
        lambda: (
            f"{args.topic}-{args.partition}: restored {result.segments} segment(s), offsets "
            f"{result.log_start_offset}..{result.end_offset}, {fmt_bytes(result.bytes)} to {result.directory}"
        ),
    )
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.isolation import IsolationLevel
    from tiering_core.replay import Partitioning, RangeRequest, ReplayRequest, replay
    from tiering_core.replay.target import replay_cluster
    from tiering_core.report.summaries import format_replay_summary

    request = ReplayRequest(
        topic=args.topic,
        target_topic=args.target_topic,
        range=RangeRequest(args.from_offset, args.from_timestamp, args.to_offset, args.to_timestamp),
        partitions=tuple(args.partitions or ()),
        topic_id=args.topic_id,
        isolation=IsolationLevel(args.isolation),
        partitioning=Partitioning(args.partitioning),
        concurrency=args.concurrency,
        max_request_size=args.max_request_size,
    )
    config = _config(args)
    kafka = replay_cluster(config, args.target, args.bootstrap_servers)  # refused before anything connects
    with TieringContext.open(config) as ctx:
        result = replay(ctx, request, kafka, events=_events(args), run="tiering replay")
    _emit(args, result.to_dict(), lambda: format_replay_summary(result))
    for failed in result.failed:
        tp = f"{failed.topic}-{failed.partition}"
        print(f"tiering: replay of {tp} {failed.outcome}: {failed.detail}", file=sys.stderr)
    if result.failed:
        return EXIT_FAILURE
    return EXIT_GAP if result.has_gaps else EXIT_OK


def cmd_db(args: argparse.Namespace) -> int:
    """The schema and backups work on the database directly, never through an opened store: an
    older store, which every other command refuses, is exactly what ``upgrade`` and a backup
    before it are for."""
    from tiering_core.metadata.migrations import current_revision, downgrade, upgrade

    metadata = _config(args).metadata
    url, timeouts = metadata.url, metadata.timeouts
    if args.db_command == "backup":
        return _db_backup(args, url)
    if args.db_command == "upgrade":
        upgrade(url, args.revision, timeouts)
    elif args.db_command == "downgrade":
        downgrade(url, args.revision, timeouts)
    revision = current_revision(url, timeouts)
    _emit(args, {"revision": revision}, lambda: f"metadata schema at revision {revision}")
    return EXIT_OK


def _db_backup(args: argparse.Namespace, url: str) -> int:
    from tiering_core.metadata.backup import backup_store

    done = backup_store(url, Path(args.file), force=args.force)
    _emit(
        args,
        done.to_dict(),
        lambda: (
            f"backed up the metadata store to {done.path} "
            f"({fmt_bytes(done.size_bytes)}, {done.size_bytes} bytes, schema revision {done.revision})"
        ),
    )
    return EXIT_OK


def cmd_recover(args: argparse.Namespace) -> int:
    """Fails (exit 1) when a manifest could not be recovered: the prefix is then left unbound."""
    from tiering_core.report.results import format_recovery
    from tiering_core.runs.recover import recover_store

    with _context(args) as ctx:
        result = recover_store(ctx, topic=args.topic, dry_run=args.dry_run, progress=_progress(args))
    _emit(args, result.to_dict(), lambda: format_recovery(result))
    return EXIT_FAILURE if result.failed else EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from tiering_core.cli.demo import run_demo

    return run_demo(
        Path(args.dir), say=_progress(args), backend=args.backend, as_json=args.json, spark=not args.no_spark
    )
