from __future__ import annotations

from tests.bench.support import run_bench


def test_bench_arrow_decode_quick_prints_the_three_decoders_and_their_ratios() -> None:
    out = run_bench("bench_arrow_decode.py", "--quick", "--profiles", "default,8k")
    assert "warm-up: first Arrow decode" in out
    for profile in ("default", "8k"):
        for name in ("arrow_vs_kafka_python", "arrow_vs_python_decoder", "python_decoder_vs_kafka_python"):
            assert any(
                row.startswith(f"RATIO {name} = ") and row.endswith(f"[{profile}]") for row in out.splitlines()
            ), out
    assert "kafka-python:" in out and "records/s" in out and "summary" in out
