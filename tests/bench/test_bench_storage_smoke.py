from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_storage_quick_prints_ratios() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_storage.py"), "--quick"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=300,
    ).stdout
    for name in (
        "s3_upload_throughput/boto3_upload_file",
        "s3_stream_read_throughput/boto3_get_object",
        "filesystem_throughput/copyfile",
        "rss_growth/64MiB_target",
    ):
        assert re.search(rf"^RATIO {re.escape(name)} = \d+\.\d\d ", out, re.MULTILINE), out
