from __future__ import annotations

import json
import re

from tests.bench.support import run_bench

MEASURED = (
    "highest_offset_for_epoch",
    "segment_for",
    "list_segments_fresh_process",
    "list_segments_cold",
    "list_segments_warm",
    "add+finish",
)


def test_bench_metadata_quick_prints_every_ratio() -> None:
    out = run_bench("bench_metadata.py", "--quick")
    assert re.search(r"loaded 5 partitions x 50 segments = 250 rows", out), out
    for name in MEASURED:
        for quantile in ("p50", "p99"):
            pattern = rf"^RATIO {re.escape(name)}_{quantile}/target = (\d+\.\d\d) \(target <= 1\.0\)$"
            match = re.search(pattern, out, re.M)
            assert match is not None, out
            assert float(match.group(1)) > 0
    figures = json.loads(out.strip().splitlines()[-1])
    assert set(figures) == set(MEASURED)
    assert all(0 < f["p50_ms"] <= f["p99_ms"] for f in figures.values())
