"""The page's titled tables (the last replays, the last erasures): one row per record, each cell
labelled by its column for the narrow layout and marked bad where the record needs a look."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

BAD = ' class="bad"'


def titled_table(name: str, title: str, columns: Sequence[str], rows: Iterable[Sequence[tuple[str, bool]]]) -> str:
    """A section (css class ``name``) headed ``title`` holding one table; each row is its cells'
    (text, bad) in ``columns``' order; nothing at all without a row."""
    body = []
    for row in rows:
        cells = "".join(
            f'<td{BAD if bad else ""} data-label="{html.escape(column)}">{html.escape(value)}</td>'
            for column, (value, bad) in zip(columns, row, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    return (
        f"<section class='{name}' aria-label='{html.escape(title)}'><h2>{html.escape(title)}</h2>"
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        "</section>"
    )
