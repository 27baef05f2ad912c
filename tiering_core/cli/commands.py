"""The ``tiering`` command: ``tiering --config FILE <command>``.

Exit 0 on success; otherwise non-zero with a one-line reason on stderr. ``--json`` prints
machine-readable output whose field names are stable (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tiering_core.errors import TieringError, one_line

log = logging.getLogger("tiering")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_GAP = 3

Handler = Callable[[argparse.Namespace], int]


def _emit(args: argparse.Namespace, payload: Any, human: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(payload, indent=2, sort_keys=False, default=str))
    else:
        text = human()
        if text:
            print(text)


def _config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from tiering_core.config import load_config

    path = args.config or os.environ.get("TIERING_CONFIG")
    if not path:
        raise TieringError("no config file: pass --config FILE or set TIERING_CONFIG")
    return load_config(path)


def _context(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from tiering_core.context import TieringContext

    return TieringContext.open(_config(args))


def _progress(args: argparse.Namespace) -> Callable[[str], None]:
    def report(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    return report


# --- commands -------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from tiering_core.cli.output import format_status_table
    from tiering_core.tier.status import collect_status

    with _context(args) as ctx:
        rows = collect_status(ctx, args.topic, args.partition)
    _emit(args, [row.to_dict() for row in rows], lambda: format_status_table(rows))
    return EXIT_OK


def cmd_copy(args: argparse.Namespace) -> int:
    from tiering_core.cli.output import format_copy_summary
    from tiering_core.errors import TieringGapError
    from tiering_core.runs.copy import CopyResult, run_copy

    results = []
    failures: list[str] = []
    gap = False
    with _context(args) as ctx:
        for partition_log in ctx.partitions(args.topic, args.partition):
            tp = partition_log.topic_partition
            try:
                results.append(run_copy(ctx, tp, dry_run=args.dry_run, progress=_progress(args)))
            except TieringGapError as exc:
                gap = True
                if isinstance(exc.result, CopyResult):
                    results.append(exc.result)
                failures.append(str(exc))
            except TieringError as exc:
                failures.append(f"{tp}: {exc}")
    _emit(args, [r.to_dict() for r in results], lambda: format_copy_summary(results))
    for failure in failures:
        print(f"tiering: copy failed: {failure}", file=sys.stderr)
    if gap and len(failures) == 1:
        return EXIT_GAP
    return EXIT_FAILURE if failures else EXIT_OK


def cmd_retention(args: argparse.Namespace) -> int:
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
                lambda: (
                    "\n".join(
                        f"{'deleted' if o.deleted else 'orphan'} {o.kind} {o.key} ({o.size} bytes, {o.age_ms} ms old)"
                        for o in orphans
                    )
                    or "no orphaned objects"
                ),
            )
            return EXIT_OK
        results = []
        for partition_log in ctx.partitions(args.topic, args.partition):
            try:
                results.append(run_retention(ctx, partition_log.topic_partition, dry_run=args.dry_run))
            except TieringError as exc:
                failures.append(f"{partition_log.topic_partition}: {exc}")
    _emit(
        args,
        [r.to_dict() for r in results],
        lambda: "\n".join(_retention_line(r) for r in results),
    )
    for failure in failures:
        print(f"tiering: retention failed: {failure}", file=sys.stderr)
    return EXIT_FAILURE if failures else EXIT_OK


def _retention_line(r: Any) -> str:
    line = f"{r.topic}-{r.partition}: "
    if r.skipped_reason:
        return line + f"skipped ({r.skipped_reason})"
    line += f"{'would delete' if r.dry_run else 'deleted'} "
    line += f"{len(r.planned) if r.dry_run else r.segments_deleted} segment(s)"
    if not r.dry_run:
        line += f", {r.bytes_deleted} bytes"
    if r.copies_cleaned:
        line += f"; cleaned up {r.copies_cleaned} copy(ies) a killed run left"
    if r.new_remote_log_start_offset is not None:
        line += f"; remote log start offset {'would become' if r.dry_run else '->'} {r.new_remote_log_start_offset}"
    if r.fenced:
        line += " (held by another run)"
    return line


def cmd_delete_partition(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
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

    def human() -> str:
        ids = ", ".join(result.topic_ids) or "none"
        line = f"{args.topic}-{args.partition} (topic id {ids}): " + (
            f"would delete {len(result.planned)} segment(s) and {len(result.orphan_objects)} unreferenced object(s)"
            if result.dry_run
            else f"deleted {result.segments_deleted} segment(s), {result.bytes_deleted} bytes, "
            f"{len(result.orphan_objects)} unreferenced object(s); state {result.state}"
        )
        if result.kept_topic_ids:
            line += f"; kept topic id {', '.join(result.kept_topic_ids)} (still in the log dirs)"
        return line

    _emit(args, result.to_dict(), human)
    return EXIT_FAILURE if result.fenced else EXIT_OK


def cmd_delete_records(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.runs.retention import apply_delete_records

    if not args.yes:
        raise TieringError("refusing to delete records without --yes")
    with _context(args) as ctx:
        offset = apply_delete_records(ctx, TopicPartition(args.topic, args.partition), args.before_offset)
    _emit(
        args,
        {"topic": args.topic, "partition": args.partition, "log_start_offset": offset},
        lambda: f"{args.topic}-{args.partition}: log start offset is now {offset}; run retention to delete",
    )
    return EXIT_OK


def cmd_segments(args: argparse.Namespace) -> int:
    from tiering_core.cli.output import format_segments_table
    from tiering_core.tier.status import list_remote_segments

    with _context(args) as ctx:
        rows = list_remote_segments(ctx, args.topic, args.partition)
    _emit(args, rows, lambda: format_segments_table(rows))
    return EXIT_OK


def cmd_rebuild_indexes(args: argparse.Namespace) -> int:
    import time

    from tiering_core.cli.output import format_rebuild_summary
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.runs.rebuild import rebuild_partition_indexes

    started = time.monotonic()
    with _context(args) as ctx:
        result = rebuild_partition_indexes(
            ctx,
            TopicPartition(args.topic, args.partition),
            repair=not args.check_only,
            local=args.local,
            progress=_progress(args),
        )
    summary = format_rebuild_summary([result], time.monotonic() - started)
    _emit(args, result.to_dict(), lambda: summary)
    if result.busy:
        print(f"tiering: {args.topic}-{args.partition}: another run holds the partition; try again", file=sys.stderr)
        return EXIT_FAILURE
    for check in result.unresolved:
        print(f"tiering: rebuild-indexes: {check.describe()}", file=sys.stderr)
    return EXIT_FAILURE if result.unresolved else EXIT_OK


def cmd_fetch(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.read.reader import open_reader

    if args.max_records < 1:
        raise TieringError(f"--max-records must be at least 1, got {args.max_records}")
    with _context(args) as ctx:
        records = open_reader(ctx, TopicPartition(args.topic, args.partition)).read(args.offset, args.max_records)

    def human() -> str:
        return (
            "\n".join(
                f"offset {r.offset} timestamp {r.timestamp} leader_epoch {r.leader_epoch} "
                f"key {_show(r.key)} value {_show(r.value)}" + (f" headers {len(r.headers)}" if r.headers else "")
                for r in records
            )
            or "no records"
        )

    _emit(args, [r.to_dict() for r in records], human)
    return EXIT_OK


def _show(data: bytes | None, limit: int = 60) -> str:
    if data is None:
        return "null"
    text = repr(data[:limit])
    return text + ("..." if len(data) > limit else "")


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
    from tiering_core.cli.output import format_verify_summary
    from tiering_core.read.verify import verify_partition

    results = []
    with _context(args) as ctx:
        for partition_log in ctx.partitions(args.topic, args.partition):
            for checked in verify_partition(ctx, partition_log.topic_partition):
                results.append(checked)
                if not args.json:
                    print(checked.describe(), flush=True)
    bad = [r for r in results if not r.ok]
    _emit(args, [r.to_dict() for r in results], lambda: format_verify_summary(results))
    for r in bad:
        print(f"tiering: verify: {r.describe()}", file=sys.stderr)
    return EXIT_FAILURE if bad else EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.read.restore import restore_partition

    with _context(args) as ctx:
        result = restore_partition(
            ctx, TopicPartition(args.topic, args.partition), Path(args.to), progress=_progress(args), force=args.force
        )
    _emit(
        args,
        result.to_dict(),
        lambda: (
            f"{args.topic}-{args.partition}: restored {result.segments} segment(s), offsets "
            f"{result.log_start_offset}..{result.end_offset}, {result.bytes} bytes to {result.directory}"
        ),
    )
    return EXIT_OK


def cmd_db(args: argparse.Namespace) -> int:
    from tiering_core.metadata.migrations import current_revision, downgrade, upgrade

    url = _config(args).metadata.url
    if args.db_command == "upgrade":
        upgrade(url, args.revision)
    elif args.db_command == "downgrade":
        downgrade(url, args.revision)
    revision = current_revision(url)
    _emit(args, {"revision": revision}, lambda: f"metadata schema at revision {revision}")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from tiering_core.demo.run import run_demo

    return run_demo(
        Path(args.dir), say=_progress(args), backend=args.backend, as_json=args.json, spark=not args.no_spark
    )


# --- parser ---------------------------------------------------------------------------------


def _add_selectors(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    parser.add_argument("--topic", required=required, help="topic name")
    parser.add_argument("--partition", type=int, required=required, help="partition number (needs --topic)")


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``--config``, ``--json`` and ``-v`` before or after the command (``tiering segments ... --json``).

    On the subcommands they default to SUPPRESS, so an option given before the command is kept.
    """

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--config", default=default(None), help="platform config file (YAML); default: $TIERING_CONFIG")
    parser.add_argument("--json", action="store_true", default=default(False), help="machine-readable output")
    parser.add_argument("-v", "--verbose", action="store_true", default=default(False), help="debug logging")


class _SubcommandsWithGlobalOptions(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Every subcommand also accepts the global options."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        _add_global_options(parser, defaults=False)
        return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiering", description="Batch tiered storage for Apache Kafka (KIP-405).")
    _add_global_options(parser, defaults=True)
    parser.register("action", "parsers", _SubcommandsWithGlobalOptions)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("status", help="tier state of every partition")
    _add_selectors(p)
    p.set_defaults(handler=cmd_status)

    p = sub.add_parser("copy", help="copy closed segments below the LSO to remote storage")
    _add_selectors(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.set_defaults(handler=cmd_copy)

    p = sub.add_parser("retention", help="delete remote segments that breach retention")
    _add_selectors(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--orphans", action="store_true", help="list remote objects no metadata references")
    p.add_argument(
        "--delete-orphans", action="store_true", help="delete orphans older than --grace-ms (not with --dry-run)"
    )
    p.add_argument("--grace-ms", type=int, default=3_600_000, help="orphans younger than this are kept")
    p.set_defaults(handler=cmd_retention)

    p = sub.add_parser("delete-partition", help="delete all remote data of a partition (needs --yes)")
    _add_selectors(p, required=True)
    p.add_argument("--yes", action="store_true", help="really delete")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument(
        "--topic-id",
        default=None,
        help="remove exactly this topic id (needed while the partition is still in the log dirs)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="remove topic ids missing from the log dirs without positive evidence of their deletion "
        "(live meta.properties in every log dir, the partition's -delete directory)",
    )
    p.add_argument(
        "--lift-tombstone",
        action="store_true",
        help="lift the tombstone of --topic-id (a removal made in error): it may be tiered again (needs --yes)",
    )
    p.set_defaults(handler=cmd_delete_partition)

    p = sub.add_parser("delete-records", help="apply a DeleteRecords to the remote tier (needs --yes)")
    _add_selectors(p, required=True)
    p.add_argument("--before-offset", type=int, required=True)
    p.add_argument("--yes", action="store_true")
    p.set_defaults(handler=cmd_delete_records)

    p = sub.add_parser("segments", help="list a partition's remote segments")
    _add_selectors(p, required=True)
    p.set_defaults(handler=cmd_segments)

    p = sub.add_parser(
        "rebuild-indexes", help="rebuild a partition's remote segment indexes from the .log; repair what differs"
    )
    _add_selectors(p, required=True)
    p.add_argument("--check-only", action="store_true", help="report what differs, repair nothing")
    p.add_argument("--local", action="store_true", help="also check the broker's own segment indexes (read-only)")
    p.set_defaults(handler=cmd_rebuild_indexes)

    p = sub.add_parser("fetch", help="read records from the remote tier")
    _add_selectors(p, required=True)
    p.add_argument("--offset", type=int, required=True, help="first offset to read")
    p.add_argument("--max-records", type=int, default=10, help="at most this many records (default 10)")
    p.set_defaults(handler=cmd_fetch)

    p = sub.add_parser("find-offset", help="the first remote record at or after a timestamp")
    _add_selectors(p, required=True)
    p.add_argument("--timestamp", type=int, required=True, help="milliseconds since the epoch")
    p.add_argument("--from-offset", type=int, default=None, help="starting offset (default: the log start)")
    p.set_defaults(handler=cmd_find_offset)

    p = sub.add_parser("verify", help="check every finished remote segment against its manifest and metadata")
    _add_selectors(p)
    p.set_defaults(handler=cmd_verify)

    p = sub.add_parser("restore", help="write a partition's remote tier back as a Kafka partition directory")
    _add_selectors(p, required=True)
    p.add_argument("--to", required=True, help="target log dir, not a broker's: <topic>-<partition> is made in it")
    p.add_argument(
        "--force", action="store_true", help="write into a target holding meta.properties or checkpoint files"
    )
    p.set_defaults(handler=cmd_restore)

    p = sub.add_parser("db", help="metadata schema migrations")
    p.register("action", "parsers", _SubcommandsWithGlobalOptions)
    dbsub = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = dbsub.add_parser("upgrade", help="migrate the metadata schema to a revision (default head)")
    up.add_argument("revision", nargs="?", default="head")
    down = dbsub.add_parser("downgrade", help="migrate the metadata schema down to a revision")
    down.add_argument("revision")
    dbsub.add_parser("current", help="print the schema revision")
    p.set_defaults(handler=cmd_db)

    p = sub.add_parser("demo", help="build a demo log dir, start a local S3 endpoint, copy, print status")
    p.add_argument("--dir", default="demo-run", help="where the demo's log dir, metadata and config go")
    p.add_argument("--backend", choices=["s3", "filesystem"], default="s3")
    p.add_argument("--no-spark", action="store_true", help="copy every topic in-process, without local Spark")
    p.set_defaults(handler=cmd_demo)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "alembic", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    handler: Handler = args.handler
    try:
        return handler(args)
    except TieringError as exc:
        print(f"tiering: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("tiering: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file vanished or a disk failed under us: name it, no traceback
        log.debug("%s failed", args.command, exc_info=True)
        print(f"tiering: {args.command}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # a bug: still one line, the traceback with --verbose
        log.debug("%s failed", args.command, exc_info=True)
        print(
            f"tiering: {args.command} failed unexpectedly: {type(exc).__name__}: {_one_line(exc)}"
            + ("" if args.verbose else " (rerun with -v for the traceback)"),
            file=sys.stderr,
        )
        return EXIT_FAILURE


def _one_line(exc: BaseException) -> str:
    return one_line(exc) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
