from __future__ import annotations

import os
import re

from tests.bench.support import ROOT, run_bench


def test_bench_quota_quick_prints_the_ratio_per_thread_count() -> None:
    out = run_bench("bench_quota.py", "--quick", env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    for threads in (1, 4, 16):
        head = rf"^threads={threads} +cap 4\.0 MiB/s over 3 s: endpoint received "
        line = re.search(head + r".* tokens granted / bytes received (\d\.\d+)$", out, re.M)
        assert line is not None and float(line.group(1)) == 1.0, out  # every byte at the endpoint took a token
        assert re.search(rf"^RATIO quota_held/threads_{threads} = \d+\.\d\d \(target <= 1\.05\)$", out, re.M), out
