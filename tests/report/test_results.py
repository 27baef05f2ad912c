"""What a run's result reads as once the run is over."""

from __future__ import annotations


def test_orphans_read_in_human_units_and_their_json_keeps_the_raw_numbers() -> None:
    from tiering_core.report.results import format_orphans
    from tiering_core.runs.orphans import OrphanObject

    orphan = OrphanObject("p/orders-x/0/00000000000000000000-a.log", 62304, 3780950, deleted=False)
    assert format_orphans([orphan]) == "orphan object p/orders-x/0/00000000000000000000-a.log (60.8 KiB, 1h 3m old)"
    assert (orphan.to_dict()["size"], orphan.to_dict()["age_ms"]) == (62304, 3780950)
