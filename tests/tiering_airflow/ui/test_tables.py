"""The page's titled tables: nothing without a row; cells escaped, labelled and marked bad."""

from __future__ import annotations

import pytest

from tiering_airflow.ui.tables import titled_table


def test_no_row_no_section() -> None:
    assert titled_table("replays", "Last replays", ("A",), []) == ""


def test_cells_are_escaped_labelled_by_their_column_and_marked_bad() -> None:
    section = titled_table("things", "Last <things>", ("Name", "State"), [(("<b>x</b>", False), ("failed", True))])
    assert section.startswith("<section class='things' aria-label='Last &lt;things&gt;'><h2>Last &lt;things&gt;</h2>")
    assert '<td data-label="Name">&lt;b&gt;x&lt;/b&gt;</td><td class="bad" data-label="State">failed</td>' in section
    assert "<th>Name</th><th>State</th>" in section


def test_a_row_with_another_number_of_cells_is_refused() -> None:
    with pytest.raises(ValueError):
        titled_table("things", "Things", ("Name", "State"), [(("x", False),)])
