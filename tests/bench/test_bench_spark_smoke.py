from __future__ import annotations

from tests.bench.support import run_bench


def test_bench_spark_quick_prints_ratios() -> None:
    out = run_bench("bench_spark.py", "--quick")
    for name in (
        "parallel_upload_speedup/sequential_cli_copy",
        "parallel_upload_speedup_median_round/sequential_cli_copy",
        "driver_check_time/parallel_upload_time",
        "index_rebuild_time/plain_read_time",
        "spark_index_rebuild_time/plain_read_time",
        "remote_index_check_time/plain_read_time",
    ):
        assert f"RATIO {name} = " in out, out
