"""``tiering erase``'s options: refused in one line without --yes (or --dry-run), without a topic
or a key; --key and --key-file exclude each other; its lines name segments and counts."""

from __future__ import annotations

import pytest

from tiering_core.cli import main
from tiering_core.cli.erase import format_erasure, format_erasures
from tiering_core.metadata.erasures import ErasureRecord, SegmentErasure
from tiering_core.runs.erase import ErasureResult, PartitionErasure, SegmentHit


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--topic", "orders", "--key", "user-1"], "refusing to erase records of orders without --yes"),
        (["--key", "user-1", "--yes"], "erase needs --topic"),
        (["--topic", "orders", "--yes"], "erase needs --key or --key-file"),
    ],
)
def test_an_incomplete_erasure_is_refused_in_one_line(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    config = tmp_path / "unused.yaml"  # refused before any config is read
    assert main(["--config", str(config), "erase", *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and reason in err
    assert "user-1" not in err


def test_key_and_key_file_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["erase", "--topic", "orders", "--key", "a", "--key-file", "keys.txt", "--yes"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_lines_name_each_segment_and_the_counts() -> None:
    hits = [SegmentHit("s-1", 0, 9, 3, "n-1"), SegmentHit("s-2", 20, 29, 1, "n-2")]
    partition = PartitionErasure("orders", 0, "T" * 22, segments_read=3, segments_unchanged=1, hits=hits)
    result = ErasureResult("e-1", ("aa" * 32,), [partition])
    assert format_erasure(result).splitlines() == [
        "orders-0: segment s-1 [0..9]: removed 3 record(s) (now n-1)",
        "orders-0: segment s-2 [20..29]: removed 1 record(s) (now n-2)",
        "orders-0: read 3 segment(s), 2 held the key(s), 1 left as they were",
        "erase e-1: 1 key(s), 1 partition(s), removed 4 record(s)",
    ]
    record = ErasureRecord("e-1", "orders", "T" * 22, 0, ("aa" * 32,), "dag run 7", 5, (SegmentErasure("a", "b", 4),))
    assert format_erasures([record]) == (
        "e-1 orders-0 started: 1 key(s), 1 segment(s) copied again, 4 record(s) removed, by dag run 7, started 5"
    )
    assert format_erasures([]) == "no erasure recorded"
