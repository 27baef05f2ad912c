from __future__ import annotations

import json
import os
import re

from tests.bench.support import ROOT, run_bench


def test_bench_page_quick_prints_both_routes_beside_the_bare_query() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    out = run_bench("bench_page.py", "--quick", env={**env, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert re.search(r"^3 brokers x 300 partitions, 5 requests each$", out, re.M), out
    for name in ("page", "metrics"):
        assert re.search(rf"^RATIO {name}_p99/target = \d+\.\d\d \(target <= 1\.0\)$", out, re.M), out
        match = re.search(rf"^RATIO {name}_p50/bare_query_p50 = (\d+\.\d\d)$", out, re.M)
        assert match is not None and float(match.group(1)) > 0, out
    figures = json.loads(out.strip().splitlines()[-1])
    assert set(figures) == {"bare_query", "page", "metrics"}
    assert all(0 < f["p50_ms"] <= f["p99_ms"] for f in figures.values())
