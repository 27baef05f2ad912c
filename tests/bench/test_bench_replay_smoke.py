from __future__ import annotations

import json
import os
import re

from tests.bench.support import ROOT, run_bench
from tests.real_kafka import conftest as real_kafka
from tests.real_kafka.cluster import KafkaCluster

# The real-Kafka fixtures, for this module too.
kafka_dist = real_kafka.kafka_dist
kafka = real_kafka.kafka


def test_bench_replay_quick_prints_the_ratio_against_the_producer(kafka: KafkaCluster) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = run_bench("bench_replay.py", "--quick", "--bootstrap-servers", kafka.bootstrap_servers, env=env)
    assert re.search(r"^tier: 2 partition\(s\) x 5,000 records of 200 B values", out, re.M), out
    assert re.search(r"^replay: +[\d,]+ records/s", out, re.M), out
    assert re.search(r"^producer: +[\d,]+ records/s", out, re.M), out
    ratio = re.search(r"^RATIO replay/producer = (\d+\.\d\d) \(target >= 0\.8\)$", out, re.M)
    assert ratio is not None and float(ratio.group(1)) > 0, out
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["replay_records_per_s"] > 0 and figures["producer_records_per_s"] > 0
