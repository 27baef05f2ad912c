from __future__ import annotations

import json
import os
import re

from tests.bench.support import ROOT, run_bench

PER_PARTITION = ("record_run", "record_one", "best_replica")


def test_bench_cluster_quick_prints_every_ratio_side_by_side() -> None:
    out = run_bench("bench_cluster.py", "--quick", env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert re.search(r"^3 brokers x 200 partitions$", out, re.M), out
    assert re.search(r"^prefilled [\d,]+ chart points for 3 brokers x 200 partitions", out, re.M), out
    for name in PER_PARTITION:
        for quantile in ("p50", "p99"):
            pattern = rf"^RATIO {name}_{quantile}/target = (\d+\.\d\d) \(target <= 1\.0\)$"
            assert re.search(pattern, out, re.M) is not None, out
    assert re.search(r"^RATIO cluster_view/target = \d+\.\d\d \(target <= 1\.0\)$", out, re.M), out
    match = re.search(r"^RATIO cluster_view/plain_listing = (\d+\.\d\d)$", out, re.M)
    assert match is not None and float(match.group(1)) > 0, out
    assert re.search(r"^cluster view of 600 replicas: .* plain listing of the same rows ", out, re.M), out
    figures = json.loads(out.strip().splitlines()[-1])
    assert set(figures) == {*PER_PARTITION, "cluster_view", "plain_listing"}
    assert all(0 < figures[name]["p50_ms"] <= figures[name]["p99_ms"] for name in PER_PARTITION)
    assert figures["cluster_view"]["ms"] > 0 and figures["plain_listing"]["ms"] > 0
