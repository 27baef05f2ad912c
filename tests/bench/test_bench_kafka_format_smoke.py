from __future__ import annotations

from tests.bench.support import run_bench


def test_bench_kafka_format_quick_prints_ratios_for_every_profile() -> None:
    out = run_bench("bench_kafka_format.py", "--quick")
    for profile in ("default", "16k", "8k"):
        for name in (
            "index_rebuild_time/plain_read_time",
            "crc_verify_throughput/raw_crc32c_throughput",
            "decode_speedup_vs_kafka_python",
        ):
            rows = [row for row in out.splitlines() if row.startswith(f"RATIO {name} = ")]
            assert any(row.endswith(f"[{profile}]") for row in rows), out
        assert f"[{profile}] segment:" in out
    assert "full decode of the whole segment" in out and "targets met" in out
