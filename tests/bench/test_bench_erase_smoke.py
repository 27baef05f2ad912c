"""The erasure benchmark at a small size: the one-key erasure reads the segment holding the key and
rules nearly every other out by its key filter; the full pass copies every segment again, and both
ratios are printed."""

from __future__ import annotations

import re

from tests.bench.support import run_bench


def test_bench_erase_quick_reads_only_where_the_key_may_be_and_prints_both_ratios() -> None:
    out = run_bench("bench_erase.py", "--quick", timeout=900)
    assert "copied 100 segments" in out and "subject-0001 in 1\n" in out, out
    found = re.search(r"^one key: (\d+) segment\(s\) read, (\d+) ruled out by their key filter", out, re.MULTILINE)
    assert found, out
    read, ruled_out = int(found[1]), int(found[2])
    assert read + ruled_out == 100 and 1 <= read <= 3, out  # the hit, and at most two false positives
    assert re.search(r"^RATIO one_key_bytes_read/tier_bytes = \d+\.\d+ \(target <= 0\.03\)$", out, re.MULTILINE), out
    assert "full erase of 100 keys: 100 segments in " in out, out
    assert re.search(r"^RATIO full_erase/rewrite_segments_per_second = \d+\.\d+ ", out, re.MULTILINE), out
