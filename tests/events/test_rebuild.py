"""A segment's index verdict: an error outranks a repair, a repair outranks what was found, a missing
index outranks a differing one; only a segment read without error and with an index not ok needs a
repair; its JSON carries each index's finding and the overall status."""

from __future__ import annotations

import json

import pytest

from tiering_core.events.rebuild import IndexCheck, IndexFinding, IndexStatus
from tiering_core.storage.layout import ObjectKind

OK = IndexFinding(ObjectKind.OFFSET_INDEX, IndexStatus.OK, 24, 24)
MISSING = IndexFinding(ObjectKind.TRANSACTION_INDEX, IndexStatus.MISSING, None, 34, "not stored")
DIFFERED = IndexFinding(ObjectKind.TIME_INDEX, IndexStatus.DIFFERED, 36, 48, "first difference at byte 12")


def check(*findings: IndexFinding, **kwargs: object) -> IndexCheck:
    return IndexCheck("orders", 0, 0, 99, "remote", "7f3c9a", tuple(findings), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("findings", "extra", "status", "needs_repair"),
    [
        ((), {}, IndexStatus.OK, False),
        ((OK,), {}, IndexStatus.OK, False),
        ((OK, DIFFERED), {}, IndexStatus.DIFFERED, True),
        ((DIFFERED, MISSING), {}, IndexStatus.MISSING, True),
        ((DIFFERED, MISSING), {"repaired_as": "9b1d"}, IndexStatus.REPAIRED, True),
        ((DIFFERED,), {"error": "CRC mismatch in batch at 0", "repaired_as": "9b1d"}, IndexStatus.ERROR, False),
        ((OK,), {"error": "the .log could not be read"}, IndexStatus.ERROR, False),
    ],
)
def test_the_verdict_and_whether_it_needs_a_repair(
    findings: tuple[IndexFinding, ...], extra: dict[str, object], status: IndexStatus, needs_repair: bool
) -> None:
    verdict = check(*findings, **extra)
    assert verdict.status == status
    assert verdict.needs_repair is needs_repair


def test_its_json_carries_each_index_and_the_overall_status() -> None:
    verdict = check(OK, DIFFERED, log_bytes=4096, seconds=0.12345)
    as_dict = verdict.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict["status"] == "differed" and as_dict["seconds"] == 0.123
    assert (as_dict["location"], as_dict["segment_id"], as_dict["log_bytes"]) == ("remote", "7f3c9a", 4096)
    assert as_dict["indexes"] == [
        {
            "kind": ObjectKind.OFFSET_INDEX.value,
            "status": "ok",
            "stored_bytes": 24,
            "rebuilt_bytes": 24,
            "detail": None,
        },
        {
            "kind": ObjectKind.TIME_INDEX.value,
            "status": "differed",
            "stored_bytes": 36,
            "rebuilt_bytes": 48,
            "detail": "first difference at byte 12",
        },
    ]
    assert (as_dict["error"], as_dict["damaged_log"], as_dict["repaired_as"]) == (None, False, None)
