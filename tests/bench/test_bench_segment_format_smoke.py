from __future__ import annotations

import re

from tests.bench.support import run_bench


def test_bench_segment_format_quick_prints_ratios() -> None:
    out = run_bench("bench_segment_format.py", "--quick")
    for name in (
        "stored_bytes/original_uncompressed_json",
        "stored_bytes/original_lz4_batches",
        "copy_throughput_zstd_encrypted/plain",
        "copy_throughput_with_digests/without",
        "fetch_one_record_chunks_read/1",
    ):
        assert re.search(rf"^RATIO {re.escape(name)} = \d+\.\d+ ", out, re.MULTILINE), out
    fetched = re.search(r"^RATIO fetch_one_record_chunks_read/1 = (\d+\.\d+) ", out, re.MULTILINE)
    assert fetched is not None and float(fetched.group(1)) <= 2, out  # measured at the endpoint, at any size
