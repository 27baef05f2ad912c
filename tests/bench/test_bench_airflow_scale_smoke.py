"""The Airflow scale benchmark runs at a tiny size through a real ``airflow standalone`` and prints
its figures; both sides must have copied every closed segment (the benchmark fails otherwise)."""

from __future__ import annotations

import re

from tests.bench.support import run_bench


def test_bench_airflow_scale_small_copies_everything_on_both_sides() -> None:
    out = run_bench(
        "bench_airflow_scale.py",
        "--partitions",
        "6",
        "--segments",
        "1",
        "--baseline",
        "3",
        "--timeout",
        "300",
        timeout=900,
    )
    assert "tiering copy at 3 partitions: 3/3 segments in " in out, out
    assert "tiering copy: 6/6 segments in " in out, out
    assert re.search(r"copy DAG: 6/6 segments in [\d.]+ s, 6 copy task instances", out), out
    assert re.search(r"scheduler CPU seconds per run: [\d.]+", out), out
    assert re.search(r"sensor \+ listing: [\d.]+ s \(target <= 20 s at 4000 partitions\)", out), out
    assert re.search(r"RATIO dag_copy/tiering_copy = [\d.]+ \(target <= 1.2\)", out), out
    assert re.search(r"RATIO tiering_copy_per_segment at 6/3 partitions = [\d.]+ \(.* target <= 1.2\)", out), out
