"""The ``tiering`` command line: its options and subcommands, and ``main``, which runs one
handler of ``tiering_core.cli.commands`` and turns any failure into one line on stderr."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from tiering_core import __version__
from tiering_core.cli.commands import (
    Handler,
    cmd_copy,
    cmd_db,
    cmd_delete_partition,
    cmd_delete_records,
    cmd_demo,
    cmd_export,
    cmd_fetch,
    cmd_find_offset,
    cmd_rebuild_indexes,
    cmd_recover,
    cmd_replay,
    cmd_restore,
    cmd_retention,
    cmd_rewrite,
    cmd_segments,
    cmd_status,
    cmd_verify,
)
from tiering_core.cli.erase import add_erase_command
from tiering_core.errors import TieringError, one_line
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED

log = logging.getLogger("tiering")


def _add_selectors(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    parser.add_argument("--topic", required=required, help="topic name")
    parser.add_argument("--partition", type=int, required=required, help="partition number (needs --topic)")


def _add_renamed(container: Any, name: str, old: str, **kwargs: Any) -> None:
    """An option under Kafka's name (``--bootstrap-server``, ``--isolation-level``), and under its
    former name ``old`` as a deprecated alias: accepted, same ``dest``, left out of ``--help``."""
    action = container.add_argument(name, **kwargs)
    action.help = f"{action.help} ({old}: deprecated alias)"
    alias = {key: kwargs[key] for key in ("type", "choices", "metavar") if key in kwargs}
    container.add_argument(old, dest=action.dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **alias)


def _broker_id(text: str) -> int:
    if not text.strip().isascii() or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a broker id (a non-negative integer), got {text!r}")
    return int(text)


def _add_global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``--config``, ``--broker``, ``--json`` and ``-v`` before or after the command (``tiering segments ... --json``).

    On the subcommands they default to SUPPRESS, so an option given before the command is kept.
    """

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--config", default=default(None), help="platform config file (YAML); default: $TIERING_CONFIG")
    parser.add_argument(
        "--broker",
        type=_broker_id,
        default=default(None),
        metavar="ID",
        help="the broker whose log dirs this process reads (its node.id in the config's brokers:); "
        "default: $TIERING_BROKER_ID, or the only broker configured",
    )
    parser.add_argument("--json", action="store_true", default=default(False), help="machine-readable output")
    parser.add_argument("-v", "--verbose", action="store_true", default=default(False), help="debug logging")


Subcommands = argparse._SubParsersAction  # what add_subparsers returns (a class argparse does not name publicly)


class _SubcommandsWithGlobalOptions(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Every subcommand also accepts the global options."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        _add_global_options(parser, defaults=False)
        return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiering", description="Batch tiered storage for Apache Kafka (KIP-405).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_global_options(parser, defaults=True)
    parser.register("action", "parsers", _SubcommandsWithGlobalOptions)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_partition_commands(sub)
    add_remote_tier_commands(sub)
    add_replay_command(sub)
    add_erase_command(sub)
    add_setup_commands(sub)

    return parser


def add_partition_commands(sub: Subcommands) -> None:
    """The commands of a broker's partitions: their state, and the runs that hold their leases."""
    p = sub.add_parser("status", help="tier state of every partition")
    _add_selectors(p)
    p.add_argument(
        "--cluster",
        action="store_true",
        help="every broker's replicas from the metadata store (reads no log dir, needs no --broker)",
    )
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

    p = sub.add_parser(
        "rewrite", help="copy remote segments again in the current remote: format (rotate keys, compress)"
    )
    _add_selectors(p)
    p.set_defaults(handler=cmd_rewrite)

    p = sub.add_parser("delete-partition", help="delete all remote data of a partition (needs --yes)")
    _add_selectors(p, required=True)
    p.add_argument("--yes", action="store_true", help="really delete")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument(
        "--topic-id",
        default=None,
        help="remove exactly this topic id (while the partition is still in the log dirs: with --force)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="remove topic ids without the controller's word that Kafka deleted them (the cluster's "
        "metadata with a kafka: section, else the broker's KRaft metadata image)",
    )
    p.add_argument(
        "--lift-tombstone",
        action="store_true",
        help="lift the tombstone of --topic-id (a removal made in error): it may be tiered again (needs --yes)",
    )
    p.set_defaults(handler=cmd_delete_partition)

    p = sub.add_parser(
        "delete-records",
        help="apply a DeleteRecords to the remote tier and, with a kafka: section, to the cluster (needs --yes)",
    )
    _add_selectors(p, required=True)
    p.add_argument("--before-offset", type=int, required=True, help="the new log start offset (at most the HW)")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="check the request, apply nothing")
    p.set_defaults(handler=cmd_delete_records)


def add_remote_tier_commands(sub: Subcommands) -> None:
    """The commands that read (or repair, export, restore) what the remote tier holds."""
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
    _add_renamed(
        p,
        "--isolation-level",
        "--isolation",
        dest="isolation",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="a consumer's isolation.level: read_committed skips aborted transactions (default read_uncommitted)",
    )
    _add_record_format(p)
    p.set_defaults(handler=cmd_fetch)

    p = sub.add_parser("export", help="export a topic's remote segments to its Iceberg table, exactly once")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=None, help="only this partition (default: all)")
    _add_renamed(
        p,
        "--isolation-level",
        "--isolation",
        dest="isolation",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read_committed (default) leaves out aborted transactions; control records are never exported",
    )
    p.add_argument("--table", default=None, metavar="NAMESPACE.NAME", help="the table (default: <namespace>.<topic>)")
    p.add_argument("--dry-run", action="store_true", help="print the segments that would be exported, change nothing")
    p.set_defaults(handler=cmd_export)

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


def _add_record_format(parser: argparse.ArgumentParser) -> None:
    """``fetch``'s lines as ``kafka-console-consumer`` prints them: its formatter's properties
    (``print.key`` ...) as flags; the value alone by default."""
    for field in ("timestamp", "partition", "offset", "headers", "key"):
        parser.add_argument(
            f"--print-{field}", action="store_true", help=f"print each record's {field} before its value"
        )
    parser.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="what separates the printed fields (a consumer's key.separator; default a tab)",
    )


def _non_negative(text: str) -> int:
    if not text.strip().isascii() or not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return int(text)


def add_replay_command(sub: Subcommands) -> None:
    """``replay``: a range of the remote tier back into a Kafka topic, exactly once (docs/replay.md)."""
    p = sub.add_parser(
        "replay", help="put a range of the remote tier back into a Kafka topic through the producer, exactly once"
    )
    p.add_argument("--topic", required=True, help="the source topic")
    p.add_argument(
        "--partition",
        type=_non_negative,
        action="append",
        dest="partitions",
        default=None,
        help="a source partition (repeat for several; default: every partition the tier holds)",
    )
    p.add_argument("--topic-id", default=None, help="the source topic id (default: the newest the tier holds)")
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-offset", type=_non_negative, default=None, help="first source offset")
    start.add_argument(
        "--from-timestamp", type=_non_negative, default=None, metavar="MS", help="first record at or after this time"
    )
    end = p.add_mutually_exclusive_group()
    end.add_argument("--to-offset", type=_non_negative, default=None, help="last source offset (inclusive)")
    end.add_argument(
        "--to-timestamp", type=_non_negative, default=None, metavar="MS", help="records before the first one after this"
    )
    p.add_argument("--target-topic", required=True, help="the topic written (it must exist)")
    _add_renamed(
        p,
        "--isolation-level",
        "--isolation",
        dest="isolation",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read_committed (default) never replays aborted transactions; control records are never replayed",
    )
    p.add_argument(
        "--partitions",
        choices=("same", "key"),
        default="same",
        dest="partitioning",
        help="same (default): the source's partition number; key: where the producer's partitioner puts the key",
    )
    cluster = p.add_mutually_exclusive_group()
    cluster.add_argument(
        "--target",
        default=None,
        metavar="NAME",
        help="the cluster written: a target of the config's replay.targets (default: the config's kafka: section)",
    )
    _add_renamed(
        cluster,
        "--bootstrap-server",
        "--bootstrap-servers",
        dest="bootstrap_servers",
        default=None,
        metavar="HOST:PORT[,...]",
        help="the cluster written, by the exact servers of the kafka: section or of a replay target "
        "(any other address is refused: its credentials go only to its own servers)",
    )
    p.add_argument("--concurrency", type=int, default=4, help="source partitions in flight at once (default 4)")
    p.add_argument(
        "--max-request-size", type=int, default=1024 * 1024, help="the producer's max.request.size (default 1 MiB)"
    )
    p.set_defaults(handler=cmd_replay)


def add_setup_commands(sub: Subcommands) -> None:
    """The metadata schema, and the embedded demo."""
    p = sub.add_parser("db", help="metadata schema migrations and backups")
    p.register("action", "parsers", _SubcommandsWithGlobalOptions)
    dbsub = p.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = dbsub.add_parser("upgrade", help="migrate the metadata schema to a revision (default head)")
    up.add_argument("revision", nargs="?", default="head")
    down = dbsub.add_parser("downgrade", help="migrate the metadata schema down to a revision")
    down.add_argument("revision")
    dbsub.add_parser("current", help="print the schema revision")
    backup = dbsub.add_parser(
        "backup",
        help="copy a SQLite metadata store to FILE, consistent while runs write (PostgreSQL: see docs/upgrading.md)",
    )
    backup.add_argument("file", metavar="FILE", help="the backup file to write")
    backup.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.set_defaults(handler=cmd_db)

    p = sub.add_parser(
        "recover",
        help="rebuild the metadata store from the bucket's manifests (an empty store, or the one bound to the prefix)",
    )
    p.add_argument("--topic", help="only this topic's partitions")
    p.add_argument("--dry-run", action="store_true", help="print what would be recorded, write nothing")
    p.set_defaults(handler=cmd_recover)

    p = sub.add_parser("demo", help="build a demo log dir, start a local S3 endpoint, copy, print status")
    p.add_argument("--dir", default="demo-run", help="where the demo's log dir, metadata and config go")
    p.add_argument("--backend", choices=["s3", "filesystem"], default="s3")
    p.add_argument("--no-spark", action="store_true", help="copy every topic in-process, without local Spark")
    p.set_defaults(handler=cmd_demo)


#: Other libraries' loggers, and their level unless ``-v`` (which shows every record of theirs):
#: they log each request, retry and migration step at INFO. kafka-python logs every refused or
#: retried connection at WARNING and ERROR as well, while the command already reports a cluster
#: that does not answer in its own one line: only its CRITICAL records are shown.
QUIET_LOGGERS = {
    "kafka": logging.CRITICAL,
    "pyiceberg": logging.WARNING,
    "alembic": logging.WARNING,
    "botocore": logging.WARNING,
    "boto3": logging.WARNING,
    "urllib3": logging.WARNING,
    "s3transfer": logging.WARNING,
    "py4j": logging.WARNING,
    "werkzeug": logging.WARNING,
}


def _reason(exc: BaseException) -> str:
    """The one line ``main`` prints for a failure: the message folded, else the error's type."""
    return one_line(exc) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    before = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(logging.NOTSET if args.verbose else level)
    try:
        return _run(args)
    finally:  # a caller in this process (the demo, a test) gets its loggers back as they were
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)


def _run(args: argparse.Namespace) -> int:
    handler: Handler = args.handler
    try:
        return handler(args)
    except TieringError as exc:
        print(f"tiering: {_reason(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("tiering: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:  # a file vanished or a disk failed under us: name it, no traceback
        log.debug("%s failed", args.command, exc_info=True)
        print(f"tiering: {args.command}: {_reason(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # a bug: still one line, the traceback with --verbose
        log.debug("%s failed", args.command, exc_info=True)
        print(
            f"tiering: {args.command} failed unexpectedly: {type(exc).__name__}: {_reason(exc)}"
            + ("" if args.verbose else " (rerun with -v for the traceback)"),
            file=sys.stderr,
        )
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
