from __future__ import annotations

import re

from tests.bench.support import run_bench


def test_bench_storage_quick_prints_ratios() -> None:
    out = run_bench("bench_storage.py", "--quick")
    for name in (
        "s3_upload_throughput/boto3_upload_file",
        "s3_stream_read_throughput/boto3_get_object",
        "filesystem_throughput/copyfile",
        "rss_growth/64MiB_target",
    ):
        assert re.search(rf"^RATIO {re.escape(name)} = \d+\.\d\d ", out, re.MULTILINE), out
