from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_arrow_decode_quick_prints_the_three_decoders_and_their_ratios() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_arrow_decode.py"), "--quick", "--profiles", "default,8k"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=300,
    ).stdout
    assert "warm-up: first Arrow decode" in out
    for profile in ("default", "8k"):
        for name in ("arrow_vs_kafka_python", "arrow_vs_python_decoder", "python_decoder_vs_kafka_python"):
            assert any(
                row.startswith(f"RATIO {name} = ") and row.endswith(f"[{profile}]") for row in out.splitlines()
            ), out
    assert "kafka-python:" in out and "records/s" in out and "summary" in out
