from __future__ import annotations

import re

from tests.bench.support import run_bench
from tests.export import conftest as export_servers
from tests.export.registry_server import RegistryServer

# The real registry's fixture, for this module too.
schema_registry = export_servers.schema_registry


def test_bench_typed_export_quick_prints_both_ratios_and_every_row(schema_registry: RegistryServer) -> None:
    out = run_bench("bench_typed_export.py", "--quick", "--registry-url", schema_registry.url)
    assert re.search(r"^records: 5,000 per topic, Avro values of \d+ B", out, re.M), out
    for side in ("bytes_export", "typed_export", "fastavro_decode"):
        assert re.search(rf"^ *{side}: +[\d,]+ rows/s \([\d.]+ s, all 5,000 rows\)$", out, re.M), out
    for name, target in (("typed_export/bytes_export", "0.5"), ("typed_export/fastavro_decode", "0.7")):
        ratio = re.search(rf"^RATIO {name} = (\d+\.\d\d) \(target >= {re.escape(target)}\)$", out, re.M)
        assert ratio is not None and float(ratio.group(1)) > 0, out
