"""``tiering erase``: the right to erasure by record key across the remote tier and the topic's
export tables (its options and its handler; its lines are ``runs/erase_report.py``'s). No key is
ever printed: the lines and ``--json`` name keys by SHA-256."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tiering_core.cli.commands import command_context
from tiering_core.errors import TieringError
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_OK
from tiering_core.report.output import output_for
from tiering_core.runs.erase_report import format_erasure, format_erasures


def add_erase_command(sub: Any) -> None:
    """``erase``: its keys (``--key`` or ``--key-file``), their encoding, the partitions, and ``--status``."""
    p = sub.add_parser(
        "erase",
        help="erase every record of some keys from a topic's remote tier and export tables (needs --yes); "
        "--status lists erasures",
    )
    p.add_argument("--topic", help="the topic (required unless --status)")
    p.add_argument(
        "--partition",
        type=int,
        action="append",
        dest="partitions",
        default=None,
        help="only this partition (repeat for several; default: every partition the tier holds)",
    )
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--key", action="append", dest="keys", default=None, help="a record key (repeat for several)")
    keys.add_argument("--key-file", type=Path, default=None, help="a file of record keys, one per line")
    p.add_argument(
        "--key-encoding",
        choices=("utf8", "hex", "base64"),
        default="utf8",
        help="how the keys are written (default utf8): a key is the bytes Kafka sees",
    )
    p.add_argument("--requested-by", default="tiering erase", help="who asked, for the audit trail")
    p.add_argument("--dry-run", action="store_true", help="name what it would remove, write nothing")
    p.add_argument("--yes", action="store_true", help="really erase")
    p.add_argument("--status", action="store_true", help="list the erasures the audit trail holds")
    p.set_defaults(handler=cmd_erase)


def cmd_erase(args: argparse.Namespace) -> int:
    from tiering_core.export.erase import erase_topic
    from tiering_core.runs.erase import ErasureRequest
    from tiering_core.runs.erase_keys import KeyEncoding, decode_keys, read_key_file

    out = output_for(bool(args.json))
    if args.status:
        return _status(args)
    if args.topic is None:
        raise TieringError("erase needs --topic")
    if not args.keys and args.key_file is None:
        raise TieringError("erase needs --key or --key-file")
    if not args.yes and not args.dry_run:
        raise TieringError(f"refusing to erase records of {args.topic} without --yes (use --dry-run to see what)")
    encoding = KeyEncoding(args.key_encoding)
    keys = read_key_file(args.key_file, encoding) if args.key_file is not None else decode_keys(args.keys, encoding)
    request = ErasureRequest(args.topic, keys, tuple(args.partitions or ()), args.requested_by)
    with command_context(args) as ctx:
        result = erase_topic(ctx, request, dry_run=args.dry_run)
    out.result(result.to_dict(), lambda: format_erasure(result))
    for failure in result.failures:
        print(f"tiering: erase failed: {failure}", file=sys.stderr)
    return EXIT_FAILURE if result.failures else EXIT_OK


def _status(args: argparse.Namespace) -> int:
    with command_context(args) as ctx:
        records = ctx.metadata.erasures(args.topic)
        tables = ctx.metadata.table_erasures(args.topic)
    rows = [*(r.to_dict() for r in records), *(t.to_dict() for t in tables)]
    output_for(bool(args.json)).result(rows, lambda: format_erasures(records, tables))
    return EXIT_OK
