from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_spark_quick_prints_ratios() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_spark.py"), "--quick"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=300,
    ).stdout
    for name in (
        "parallel_upload_speedup/sequential_cli_copy",
        "parallel_upload_speedup_median_round/sequential_cli_copy",
        "driver_check_time/parallel_upload_time",
        "index_rebuild_time/plain_read_time",
        "spark_index_rebuild_time/plain_read_time",
        "remote_index_check_time/plain_read_time",
    ):
        assert f"RATIO {name} = " in out, out
