"""The Tiering page's list of the last erasures by record key (``tiering erase`` and the erase
DAG), from the store's audit trail: per partition who asked, how many keys, the segments copied
again and the records removed, and whether the erasure finished; then per export table the rows
deleted, the snapshots expired and the data files deleted. No key is shown, nor a key's
digest: a digest of a short key (a user id) can be found again by trying every value, so the
page counts the keys, and ``tiering erase --status`` (an operator's command) shows the digests."""

from __future__ import annotations

from collections.abc import Iterable

from tiering_airflow.ui.tables import titled_table
from tiering_core.humanize import fmt_age
from tiering_core.metadata.erasures import FINISHED, HELD, ErasureRecord, TableErasureRecord

#: The erasures the page lists, newest first.
LAST_ERASURES = 10
COLUMNS = ("Partition", "Requested by", "Keys", "Segments copied again", "Records removed", "Outcome", "Started")
TABLE_COLUMNS = ("Table", "Topic", "Rows deleted", "Snapshots expired", "Data files deleted", "Outcome", "Started")
#: What a table erasure's outcome means to the operator.
TABLE_OUTCOMES = {
    FINISHED: "finished",
    HELD: "held: a tag or branch keeps a snapshot holding the keys (see tiering erase --status)",
}


def erasures_html(erasures: Iterable[ErasureRecord], now_ms: int) -> str:
    """A section of the last erasures (nothing when there is none); an erasure not finished (under
    way, or killed and waiting for its rerun) is marked."""
    rows = []
    for e in erasures:
        switched = sum(1 for s in e.segments if s.new_segment_id is not None)
        outcome = "finished" if e.outcome == FINISHED else "not finished (under way, or killed: run it again)"
        rows.append(
            (
                (f"{e.topic}-{e.partition}", False),
                (e.requested_by, False),
                (f"{len(e.key_sha256):,}", False),
                (f"{switched:,}", False),
                (f"{e.records_removed:,}", False),
                (outcome, e.outcome != FINISHED),
                (f"{fmt_age(max(0, now_ms - e.started_ms))} ago", False),
            )
        )
    return titled_table("erasures", "Last erasures", COLUMNS, rows)


def table_erasures_html(erasures: Iterable[TableErasureRecord], now_ms: int) -> str:
    """A section of the last erasures from export tables (nothing when there is none); one not
    finished (held by a tag or branch, under way, or killed) is marked."""
    rows = [
        (
            (e.table, False),
            (e.topic, False),
            (f"{e.rows_deleted:,}", False),
            (f"{e.snapshots_expired:,}", False),
            (f"{e.data_files_deleted:,}", False),
            (TABLE_OUTCOMES.get(e.outcome, "not finished (under way, or killed: run it again)"), e.outcome != FINISHED),
            (f"{fmt_age(max(0, now_ms - e.started_ms))} ago", False),
        )
        for e in erasures
    ]
    return titled_table("table-erasures", "Last erasures from export tables", TABLE_COLUMNS, rows)
