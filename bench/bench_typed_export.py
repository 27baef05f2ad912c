"""Typed export benchmark: Avro values decoded into typed columns against the bytes export of the
same records, measured side by side in one run.

``--records`` records (a keyed value of an 8-field record schema: strings, longs, a double, a
nested record, an array, an enum, a timestamp-millis and a union with null) are written in Kafka's
format for two topics, one exported as bytes and one as ``value: avro``, and copied to a
filesystem tier. The schema is registered once in a real Confluent-compatible registry (Apicurio,
started here from the test cache, or ``--registry-url``); the values are fastavro's encoding framed
in the Confluent wire format (magic byte 0, 4-byte schema id), checked byte for byte against
confluent-kafka's ``AvroSerializer`` on the first records, so the registry's speed is no part of
the build. The typed export still fetches the schema by id from the registry.

Timed, in one run, each export into a fresh catalog and warehouse (SQLite catalog, file
warehouse: fetch, decode, write, commit):

- the bytes export of the first topic;
- the typed export of the second;
- fastavro's own ``schemaless_reader`` decoding the same payloads in a plain loop (no export):
  the decoder the typed export uses, its floor.

Printed: rows/s of each and the ratios typed/bytes (target >= 0.5) and typed/fastavro
(target >= 0.7). The sides take turns going first; the best of ``--rounds`` is kept. Each
export's table row count is checked against the records written (the run fails otherwise).

    python bench/bench_typed_export.py [--records 200000] [--rounds 2] [--registry-url URL] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import io
import json
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fastavro
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tiering_core.config import load_config  # noqa: E402
from tiering_core.context import TieringContext  # noqa: E402
from tiering_core.export import load_catalog, open_table, run_export, table_name  # noqa: E402
from tiering_core.kafka.log_writer import PartitionWriter  # noqa: E402
from tiering_core.kafka.records import RecordSpec  # noqa: E402
from tiering_core.kafka.topic import TopicPartition  # noqa: E402
from tiering_core.runs.copy import run_copy  # noqa: E402

BYTES_TOPIC = "bench-bytes"
AVRO_TOPIC = "bench-avro"
#: Small topics exported once before the timing: numba's compile, imports, the first catalog.
WARM_TOPICS = ("warm-bytes", "warm-avro")
WARM_RECORDS = 1_000
TARGETS = {"typed_export/bytes_export": 0.5, "typed_export/fastavro_decode": 0.7}
T0 = 1_795_000_000_000
STATES = ("NEW", "PAID", "SHIPPED", "VOID")
PER_BATCH = 500
#: Records checked against confluent-kafka's AvroSerializer, byte for byte.
SERIALIZER_CHECKS = 20

ORDER: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "quantity", "type": "long"},
        {"name": "amount", "type": "double"},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "long"}],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": list(STATES)}},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def order(i: int) -> dict[str, Any]:
    """Record ``i``'s value: distinct ids, strings and amounts, as real orders have."""
    return {
        "id": i,
        "customer": f"customer-{i * 7919 % 100_003:06d}",
        "quantity": i % 17 + 1,
        "amount": i * 0.37 + 1.25,
        "address": {"city": f"city-{i % 211}", "zip": 10_000 + i % 90_000},
        "tags": [f"tag-{(i + j) % 50}" for j in range(i % 4)],
        "state": STATES[i % 4],
        "placed_at": dt.datetime.fromtimestamp((T0 + i) / 1000, tz=dt.UTC),
        "note": None if i % 3 == 0 else f"leave at the door {i}",
    }


def frame(schema_id: int, payload: bytes) -> bytes:
    """The Confluent wire format: magic byte 0, the big-endian schema id, the Avro payload."""
    return b"\x00" + struct.pack(">I", schema_id) + payload


def encode_values(schema_id: int, records: int) -> list[bytes]:
    """``records`` framed values, fastavro-encoded."""
    parsed = fastavro.parse_schema(ORDER)
    out: list[bytes] = []
    buffer = io.BytesIO()
    for i in range(records):
        buffer.seek(0)
        buffer.truncate()
        fastavro.schemaless_writer(buffer, parsed, order(i))
        out.append(frame(schema_id, buffer.getvalue()))
    return out


def register(url: str) -> int:
    """The schema's id in the registry, registered under both typed topics' subjects; the first
    values checked against confluent-kafka's AvroSerializer, which must frame the same bytes (else
    the benchmark measures another format)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": url})
    serializer = AvroSerializer(client, json.dumps(ORDER), conf={"auto.register.schemas": True})
    ctx = SerializationContext(AVRO_TOPIC, MessageField.VALUE)
    serialized = [bytes(serializer(order(i), ctx) or b"") for i in range(SERIALIZER_CHECKS)]
    schema_id = int(struct.unpack(">I", serialized[0][1:5])[0])
    if encode_values(schema_id, SERIALIZER_CHECKS) != serialized:
        raise SystemExit("fastavro's framed values differ from AvroSerializer's")
    # the warm-up's typed topic writes the same schema: it is a version of that topic's subject too
    serializer(order(0), SerializationContext(WARM_TOPICS[1], MessageField.VALUE))
    return schema_id


def write_topic(log_dir: Path, topic: str, values: list[bytes]) -> None:
    """``values`` as keyed records of one partition, in 64 MiB segments, all closed."""
    w = PartitionWriter(log_dir, TopicPartition(topic, 0), segment_bytes=64 << 20, clock=lambda: T0)
    for start in range(0, len(values), PER_BATCH):
        chunk = values[start : start + PER_BATCH]
        w.append([RecordSpec(f"k{start + i}".encode(), v, T0 + start + i) for i, v in enumerate(chunk)])
    w.roll()
    w.set_high_watermark()


def write_config(root: Path, name: str, log_dir: Path, tier: Path, registry_url: str) -> Path:
    """A config over ``log_dir`` and the tier, the avro topic typed, a fresh catalog and warehouse."""
    warehouse = root / f"{name}-warehouse"
    warehouse.mkdir()
    doc = {
        "log_dirs": [str(log_dir)],
        "metadata": {"url": f"sqlite:///{root / 'metadata.db'}"},
        "remote": {"backend": "filesystem", "root": str(tier)},
        "export": {
            "catalog": {"type": "sql", "uri": f"sqlite:///{root / f'{name}-catalog.db'}",
                        "warehouse": warehouse.as_uri()},
            "topics": {AVRO_TOPIC: {"value": "avro"}, WARM_TOPICS[1]: {"value": "avro"}},
            "schema_registry": {"url": registry_url},
        },
    }  # fmt: skip
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def export(config: Path, topic: str) -> int:
    """The topic exported into its table: the rows the table holds (checked against the result)."""
    with TieringContext.open(load_config(config)) as ctx:
        result = run_export(ctx, topic)
        assert not result.failed, result.failed
        assert result.dead_letters == 0, f"{topic}: {result.dead_letters} dead letter(s)"
        assert ctx.config.export is not None
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, topic), create=False)
        assert table is not None, f"{topic}: no table"
        snapshot = table.current_snapshot()
        total = snapshot.summary["total-records"] if snapshot is not None and snapshot.summary else None
        held = int(total or 0)
    assert held == result.rows, (topic, held, result.rows)
    return held


def fastavro_decode(values: list[bytes]) -> int:
    """fastavro's own decode of every payload (the wire header skipped), as the export calls it."""
    parsed = fastavro.parse_schema(ORDER)
    n = 0
    for value in values:
        fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
        n += 1
    return n


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


@contextmanager
def registry(root: Path, url: str | None) -> Iterator[str]:
    """The registry's Confluent-compatible URL: ``url``, or Apicurio started here from the test cache."""
    if url is not None:
        yield url
        return
    from tests.export.registry_server import registry_server

    t0 = time.perf_counter()
    with registry_server(root / "registry") as server:
        print(f"registry: Apicurio started in {time.perf_counter() - t0:.1f} s")
        yield server.url


def bench(root: Path, log_dir: Path, tier: Path, url: str, values: list[bytes], rounds: int) -> dict[str, float]:
    records = len(values)
    sides: dict[str, Callable[[int], int]] = {
        "bytes_export": lambda r: export(write_config(root, f"bytes-{r}", log_dir, tier, url), BYTES_TOPIC),
        "typed_export": lambda r: export(write_config(root, f"typed-{r}", log_dir, tier, url), AVRO_TOPIC),
        "fastavro_decode": lambda _r: fastavro_decode(values),
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(rounds):
        order_ = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order_:
            seconds, rows = timed(functools.partial(sides[side], r))
            if rows != records:
                raise SystemExit(f"{side}: {rows:,} rows, {records:,} records written")
            times[side].append(seconds)
            print(f"  round {r + 1}: {side:>15} {seconds:7.2f} s")
    rate = {side: records / min(t) for side, t in times.items()}
    for side, rps in rate.items():
        print(f"{side:>15}: {rps:>12,.0f} rows/s ({min(times[side]):.2f} s, all {records:,} rows)")
    ratios = {
        "typed_export/bytes_export": rate["typed_export"] / rate["bytes_export"],
        "typed_export/fastavro_decode": rate["typed_export"] / rate["fastavro_decode"],
    }
    for name, value in ratios.items():
        print(f"RATIO {name} = {value:.2f} (target >= {TARGETS[name]})")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records per topic")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, sides alternating first (best is kept)")
    parser.add_argument("--registry-url", help="a Confluent-compatible registry (default: Apicurio started here)")
    parser.add_argument("--quick", action="store_true", help="5,000 records, 1 round: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds = 5_000, 1
    root = Path(tempfile.mkdtemp(prefix="bench-typed-export-"))
    try:
        with registry(root, args.registry_url) as url:
            schema_id = register(url)
            values = encode_values(schema_id, args.records)
            log_dir, tier = root / "logs", root / "tier"
            log_dir.mkdir()
            tier.mkdir()
            for topic in (BYTES_TOPIC, AVRO_TOPIC):
                write_topic(log_dir, topic, values)
            for topic in WARM_TOPICS:
                write_topic(log_dir, topic, values[:WARM_RECORDS])
            with TieringContext.open(load_config(write_config(root, "copy", log_dir, tier, url))) as ctx:
                for topic in (BYTES_TOPIC, AVRO_TOPIC, *WARM_TOPICS):
                    run_copy(ctx, TopicPartition(topic, 0))
            size = sum(len(v) for v in values)
            print(
                f"records: {args.records:,} per topic, Avro values of {size / args.records:.0f} B on average "
                f"(schema id {schema_id}), the same records in both topics, copied to a filesystem tier"
            )
            warm = write_config(root, "warm-up", log_dir, tier, url)
            seconds, _ = timed(lambda: sum(export(warm, topic) for topic in WARM_TOPICS))
            print(f"warm-up: both exports of {min(WARM_RECORDS, args.records):,} records, {seconds:.2f} s (numba)")
            print(f"\n[export] {args.rounds} round(s)")
            bench(root, log_dir, tier, url, values, args.rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
