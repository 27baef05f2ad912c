from __future__ import annotations

import re

from tests.bench.support import run_bench


def test_bench_recover_quick_reads_one_manifest_per_segment() -> None:
    out = run_bench("bench_recover.py", "--quick")
    assert re.search(r"^RATE recover_segments_per_second = \d+$", out, re.MULTILINE), out
    assert re.search(r"^RATIO manifest_gets_per_segment = 1\.00 ", out, re.MULTILINE), out
    for name in ("get_requests_per_segment", "list_requests_per_segment", "other_requests_per_segment"):
        assert re.search(rf"^RATIO {name} = \d+\.\d+ ", out, re.MULTILINE), out
