"""The Tiering page's list of the last erasures by record key (``tiering erase`` and the erase
DAG), from the store's audit trail: per partition who asked, how many keys, the segments copied
again and the records removed, and whether the erasure finished. No key is shown, nor a key's
digest: a digest of a short key (a user id) can be found again by trying every value, so the
page counts the keys, and ``tiering erase --status`` (an operator's command) shows the digests."""

from __future__ import annotations

import html
from collections.abc import Iterable

from tiering_core.humanize import fmt_age
from tiering_core.metadata.erasures import FINISHED, ErasureRecord

#: The erasures the page lists, newest first.
LAST_ERASURES = 10
BAD = ' class="bad"'
COLUMNS = ("Partition", "Requested by", "Keys", "Segments copied again", "Records removed", "Outcome", "Started")


def erasures_html(erasures: Iterable[ErasureRecord], now_ms: int) -> str:
    """A section of the last erasures (nothing when there is none); an erasure not finished (under
    way, or killed and waiting for its rerun) is marked."""
    rows = []
    for e in erasures:
        switched = sum(1 for s in e.segments if s.new_segment_id is not None)
        values = (
            (f"{e.topic}-{e.partition}", False),
            (e.requested_by, False),
            (f"{len(e.key_sha256):,}", False),
            (f"{switched:,}", False),
            (f"{e.records_removed:,}", False),
            ("finished" if e.outcome == FINISHED else "not finished (under way, or killed: run it again)",
             e.outcome != FINISHED),
            (f"{fmt_age(max(0, now_ms - e.started_ms))} ago", False),
        )  # fmt: skip
        cells = "".join(
            f'<td{BAD if bad else ""} data-label="{html.escape(title)}">{html.escape(value)}</td>'
            for title, (value, bad) in zip(COLUMNS, values, strict=True)
        )
        rows.append(f"<tr>{cells}</tr>")
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(t)}</th>" for t in COLUMNS)
    return (
        "<section class='erasures' aria-label='Last erasures'><h2>Last erasures</h2>"
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        "</section>"
    )
