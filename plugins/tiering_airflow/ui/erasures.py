"""The Tiering page's list of the last erasures by record key (``tiering erase`` and the erase
DAG), from the store's audit trail: per partition who asked, how many keys, the segments copied
again and the records removed, and whether the erasure finished. No key is shown, nor a key's
digest: a digest of a short key (a user id) can be found again by trying every value, so the
page counts the keys, and ``tiering erase --status`` (an operator's command) shows the digests."""

from __future__ import annotations

from collections.abc import Iterable

from tiering_airflow.ui.tables import titled_table
from tiering_core.humanize import fmt_age
from tiering_core.metadata.erasures import FINISHED, ErasureRecord

#: The erasures the page lists, newest first.
LAST_ERASURES = 10
COLUMNS = ("Partition", "Requested by", "Keys", "Segments copied again", "Records removed", "Outcome", "Started")


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
