"""The Spark erasure benchmark at a small size, on moto's S3 server: both sides copy every segment
again on identical tiers, and the speed-up is printed with its target."""

from __future__ import annotations

import re

from tests.bench.support import run_bench


def test_bench_spark_erase_quick_erases_every_segment_on_both_sides_and_prints_the_ratio() -> None:
    out = run_bench("bench_spark_erase.py", "--quick", "--backend", "s3", timeout=600)
    assert "4 partitions x 5 segments x 200 records = " in out and "s3 tier, 20 keys (one per segment)" in out, out
    assert "Python workers' first import of the project and a dry run of two partitions: " in out, out
    found = re.search(r"^  round 1 \(one process first\): one process +(\d+\.\d+) s .* speed-up (\d+\.\d+)$", out, re.M)
    assert found and float(found[1]) > 0, out
    assert re.search(r"^RATIO spark_erase_speedup/one_process = \d+\.\d+ \(target >= 1\.6\)$", out, re.MULTILINE), out
