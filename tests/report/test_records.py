"""``tiering fetch`` prints records as ``kafka-console-consumer`` does: the value as text, one record
per line, the formatter's ``print.*`` properties as flags, no Python reprs; ``--json`` stays raw."""

from __future__ import annotations

import base64
import json
import shutil

import pytest

from tests.cli.test_commands import run
from tests.engine_support import TieringEnv, write_segments
from tiering_core.read.reader import FetchedRecord
from tiering_core.report.records import RecordFormat, format_records, printable, record_line

SELECT = ("--topic", "orders", "--partition", "0")


def test_text_stays_text_and_what_is_not_printable_is_escaped_on_its_line() -> None:
    assert printable(b"caf\xc3\xa9 42") == "café 42"
    assert printable(b"a\nb\tc\rd\\e") == "a\\nb\\tc\\rd\\\\e"
    assert printable(b"\x00\x01\xff\xfe") == "\\x00\\x01\\xff\\xfe"
    assert printable(b"\xe2\x80\x8b") == "\\xe2\\x80\\x8b"  # a zero-width space: valid UTF-8, not printable
    assert printable(None) == "null" and printable(b"") == ""


def test_fields_come_in_kafkas_order_each_followed_by_the_key_separator() -> None:
    record = FetchedRecord(7, 1700000000000, 0, b"k", b"v", (("trace", b"t0"), ("empty", None)), "LogAppendTime")
    every = RecordFormat(True, True, True, True, True)
    assert (
        record_line(record, 3, every) == "LogAppendTime:1700000000000\tPartition:3\tOffset:7\ttrace:t0,empty:null\tk\tv"
    )
    assert record_line(record, 3, RecordFormat()) == "v"
    bare = FetchedRecord(8, 5, 0, None, None, ())
    assert record_line(bare, 3, RecordFormat(print_headers=True, print_key=True, key_separator=" | ")) == (
        "NO_HEADERS | null | null"
    )
    assert format_records([record, bare], 3, RecordFormat()) == "v\nnull" and format_records([], 3, every) == ""


def test_fetch_prints_values_by_default_and_what_the_flags_ask_for(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = fs_env.writer()
    w.append([(b"k0", b"first value", [("trace", b"t0")]), (None, b"bin\x00\xff"), (b"k2", None)])
    write_segments(w, 1)
    w.append_records(2)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "--config", cfg, "copy")[0] == 0

    code, out, err = run(capsys, "--config", cfg, "fetch", *SELECT, "--offset", "0", "--max-records", "3")
    assert (code, err) == (0, "") and out.splitlines() == ["first value", "bin\\x00\\xff", "null"]
    code, out, _ = run(capsys, "--config", cfg, "--json", "fetch", *SELECT, "--offset", "0", "--max-records", "3")
    raw = json.loads(out)
    assert code == 0 and [base64.b64decode(r["value"]) if r["value"] else None for r in raw] == [
        b"first value",
        b"bin\x00\xff",
        None,
    ]
    flags = ("--print-timestamp", "--print-partition", "--print-offset", "--print-headers", "--print-key")
    code, out, _ = run(
        capsys, "--config", cfg, "fetch", *SELECT, "--offset", "0", "--max-records", "2", *flags, "--key-separator", "|"
    )
    assert code == 0 and out.splitlines() == [
        f"CreateTime:{raw[0]['timestamp']}|Partition:0|Offset:0|trace:t0|k0|first value",
        f"CreateTime:{raw[1]['timestamp']}|Partition:0|Offset:1|NO_HEADERS|null|bin\\x00\\xff",
    ]
    assert "b'" not in out and "headers " not in out
    code, out, _ = run(
        capsys, "--config", cfg, "fetch", *SELECT, "--offset", "0", "--max-records", "1", "--print-offset"
    )
    assert code == 0 and out == "Offset:0\tfirst value\n"  # a tab by default, as the console consumer's


def test_fetch_reads_a_partition_whose_broker_directory_is_gone_from_the_tier(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    code, before, _ = run(capsys, "--config", cfg, "--json", "fetch", *SELECT, "--offset", "0", "--max-records", "50")
    assert code == 0 and len(json.loads(before)) == 10
    shutil.rmtree(w.path)
    code, after, err = run(capsys, "--config", cfg, "--json", "fetch", *SELECT, "--offset", "0", "--max-records", "50")
    assert (code, err, after) == (0, "", before)
    code, out, err = run(capsys, "--config", cfg, "fetch", "--topic", "orders", "--partition", "1", "--offset", "0")
    assert code == 1 and out == "" and err == "tiering: partition orders-1 is not in the log dirs\n"
