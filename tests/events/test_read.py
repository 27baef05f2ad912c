"""One segment's verification: ok only without problems, and its JSON a copy that later problems do
not change, saying whether the segment's bytes are proven to be the ones copied."""

from __future__ import annotations

import json

from tiering_core.events.read import SegmentVerification


def verification(**kwargs: object) -> SegmentVerification:
    return SegmentVerification("orders", 3, "7f3c9a", 100, 199, 4096, **kwargs)  # type: ignore[arg-type]


def test_a_segment_is_ok_only_without_problems() -> None:
    clean = verification()
    assert clean.ok and clean.problems == [] and clean.tamper_evident
    clean.problems.append("manifest digest differs")
    assert not clean.ok
    assert verification().problems == []  # each verification has its own list


def test_its_json_names_the_segment_and_what_is_wrong() -> None:
    checked = verification(problems=["00000000000000000100.index: 12 bytes, manifest says 24"], tamper_evident=False)
    as_dict = checked.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict == {
        "topic": "orders",
        "partition": 3,
        "segment_id": "7f3c9a",
        "start_offset": 100,
        "end_offset": 199,
        "size_bytes": 4096,
        "ok": False,
        "problems": ["00000000000000000100.index: 12 bytes, manifest says 24"],
        "tamper_evident": False,
    }
    as_dict["problems"].append("changed after")
    assert checked.problems == ["00000000000000000100.index: 12 bytes, manifest says 24"]
