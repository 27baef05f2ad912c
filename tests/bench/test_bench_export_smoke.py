from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_export_quick_prints_the_three_comparisons() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_export.py"), "--quick"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=300,
    ).stdout
    for name in (
        "arrow_decode/kafka_python_decode",
        "iceberg_export_time/pyarrow_parquet_write_time",
        "spark_export_time/cli_export_time",
    ):
        assert f"RATIO {name} = " in out, out
    assert "kafka-python:" in out and "records/s" in out and "Spark export local[2]" in out
