from __future__ import annotations

from tests.bench.support import run_bench


def test_bench_export_quick_prints_the_three_comparisons() -> None:
    out = run_bench("bench_export.py", "--quick")
    for name in (
        "arrow_decode/kafka_python_decode",
        "iceberg_export_time/pyarrow_parquet_write_time",
        "spark_export_time/cli_export_time",
    ):
        assert f"RATIO {name} = " in out, out
    assert "kafka-python:" in out and "records/s" in out and "Spark export local[2]" in out
