"""The tables the ``tiering`` command prints (``status``, ``status --cluster``, ``segments``), all
through one formatter, so that every column lines up and every table reads the same way: sizes
and ages in human units (``tiering_core.humanize``), offsets as Kafka's tools print them, numbers
right-aligned. ``--json`` prints the raw values instead; nothing here is parsed back.

One meaning of LAG everywhere: the offsets below the last stable offset not yet tiered (as a
consumer's lag counts offsets), named in the header, with its segments and bytes in columns of
their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiering_core.humanize import fmt_bytes, fmt_duration
from tiering_core.report.lines import copy_delay_words

if TYPE_CHECKING:
    from tiering_core.tier.cluster import ClusterPartitionStatus
    from tiering_core.tier.status import PartitionStatus

#: The header of the copy lag in offsets, in every table that shows it.
LAG_OFFSETS = "LAG-OFFSETS"


@dataclass(frozen=True)
class Column:
    """A table column: its header, and whether its values are numbers (right-aligned)."""

    header: str
    numeric: bool = False


def format_table(columns: Sequence[Column], rows: Iterable[Sequence[str]]) -> str:
    """The rows under their headers, two spaces apart, each column as wide as its widest cell; the
    last column is free text and is not padded."""
    table = [[c.header for c in columns], *([*row] for row in rows)]
    if any(len(row) != len(columns) for row in table):
        raise ValueError(f"every row of the table needs {len(columns)} cells")
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    lines = []
    for row in table:
        cells = [
            cell if i == len(columns) - 1 else cell.rjust(widths[i]) if column.numeric else cell.ljust(widths[i])
            for i, (cell, column) in enumerate(zip(row, columns, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def cell(value: Any) -> str:
    """A value as its table cell: ``-`` for none."""
    return "-" if value is None else str(value)


def size_cell(n: int | None) -> str:
    """A size in bytes as a person reads it (``60.8 KiB``)."""
    return "-" if n is None else fmt_bytes(n)


def status_notes(r: PartitionStatus) -> str:
    """The GAPS/RISK cell of a status row: what a person should know of the partition."""
    notes = []
    if r.not_tiered_reason:
        notes.append("not tiered: " + r.not_tiered_reason)
    if r.gaps:
        notes.append("GAP " + ",".join(f"{a}..{b}" for a, b in r.gaps))
    if r.remote_only_offsets:
        start, end = r.remote_only_offsets
        notes.append(f"remote only {start}..{end} (below the broker's log start, read from the tier)")
    if r.local_retention_risk and r.local_retention_risk.get("at_risk"):
        notes.append("AT RISK: " + str(r.local_retention_risk.get("reason")))
    if r.copy_delay:
        notes.append(copy_delay_words(r.copy_delay))
    if r.copy_skipped_reason:
        notes.append("copy skipped: " + r.copy_skipped_reason)
    if r.error:
        notes.append("error: " + r.error)
    if not r.on_broker:
        notes.append("not on broker")
    return "; ".join(notes) or "-"


def format_status_table(rows: list[PartitionStatus], exported: list[int | None] | None = None) -> str:
    """The status table; with ``exported`` (an ``export`` section is configured: per row) an
    EXPORTED column: the highest offset the partition's Iceberg table holds of its topic id."""
    columns = [
        Column("PARTITION"),
        *(
            Column(name, numeric=True)
            for name in ("LOG-START", "HW", "LSO", "LEO", "EPOCH", "COPIED", "REMOTE-SEGMENTS", "REMOTE-SIZE")
        ),
        Column(LAG_OFFSETS, numeric=True),
        Column("LAG-SEGMENTS", numeric=True),
        Column("LAG-SIZE", numeric=True),
        Column("DEL-LAG-SEGMENTS", numeric=True),
        Column("DELETE"),
        *([Column("EXPORTED", numeric=True)] if exported is not None else []),
        Column("GAPS/RISK"),
    ]
    table = [
        [
            f"{r.topic}-{r.partition}",
            cell(r.log_start_offset),
            cell(r.high_watermark),
            cell(r.last_stable_offset),
            cell(r.log_end_offset),
            cell(r.leader_epoch),
            cell(r.highest_copied_offset),
            cell(r.remote_segments),
            size_cell(r.remote_bytes),
            cell(r.copy_lag_offsets),
            cell(r.copy_lag_segments),
            size_cell(r.copy_lag_bytes),
            cell(r.delete_lag_segments),
            cell(r.delete_state),
            *([cell(exported[i])] if exported is not None else []),
            status_notes(r),
        ]
        for i, r in enumerate(rows)
    ]
    return format_table(columns, table)


def format_cluster_status(rows: list[ClusterPartitionStatus]) -> str:
    """``status --cluster``: a partition per row, each broker's replica as
    ``<broker>[*]:<HW>/<LSO> e<epoch> @<local log start> <age>`` (``*`` the best fresh replica,
    ``!`` a stale observation; the age as ``1h 3m``)."""
    if not rows:
        return "no partition observed or tiered"
    columns = [
        Column("PARTITION"),
        Column("BEST", numeric=True),
        Column("COPIED", numeric=True),
        Column(LAG_OFFSETS, numeric=True),
        Column("REMOTE-SEGMENTS", numeric=True),
        Column("REMOTE-SIZE", numeric=True),
        Column("DELETE"),
        Column("STALE"),
        Column("REPLICAS / NOTES"),
    ]
    table = []
    for r in rows:
        replicas = ", ".join(
            f"{s.broker_id}{'*' if s.broker_id == r.best_broker else '!' if s.stale else ''}:"
            f"{cell(s.high_watermark)}/{cell(s.last_stable_offset)} e{cell(s.leader_epoch)} "
            f"@{s.local_log_start_offset} {fmt_duration(s.age_ms)}"
            for s in r.replicas
        )
        notes = [replicas or "no replica observed"]
        if r.gaps:
            notes.append("GAP " + ",".join(f"{a}..{b}" for a, b in r.gaps))
        if r.at_risk:
            notes.append("AT RISK")
        table.append(
            [
                f"{r.topic}-{r.partition}",
                cell(r.best_broker),
                cell(r.highest_copied_offset),
                cell(r.copy_lag_offsets),
                cell(r.remote_segments),
                size_cell(r.remote_bytes),
                cell(r.delete_state),
                ",".join(map(str, r.stale_brokers)) or "-",
                "; ".join(notes),
            ]
        )
    return format_table(columns, table)


def format_segments_table(rows: list[dict[str, Any]]) -> str:
    """``segments``: a remote segment per row (the ``--json`` rows), its size in human units."""
    if not rows:
        return "no remote segments"
    columns = [
        Column("START", numeric=True),
        Column("END", numeric=True),
        Column("SIZE", numeric=True),
        Column("STATE"),
        Column("EPOCHS"),
        Column("SEGMENT-ID"),
    ]
    table = [
        [
            cell(r["start_offset"]),
            cell(r["end_offset"]),
            size_cell(r["size_bytes"]),
            cell(r["state"]),
            ",".join(f"{e}:{o}" for e, o in r["leader_epochs"].items()) or "-",
            cell(r["segment_id"]),
        ]
        for r in rows
    ]
    return format_table(columns, table)
