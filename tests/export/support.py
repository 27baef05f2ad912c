"""Tiered partitions with transactions and every codec, and an export section pointing at a
catalog and warehouse of the test's choosing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.engine_support import TieringEnv
from tiering_core.demo.writer import PartitionWriter
from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD

CODECS = (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)


def rows(n: int, tag: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """Records with null keys (every 4th), null values (every 5th) and headers (every 2nd)."""
    return [
        (
            None if i % 4 == 3 else f"{tag}-{i}".encode(),
            None if i % 5 == 4 else f"v-{tag}-{i}".encode(),
            [("h", b"x"), ("n", None)] if i % 2 == 0 else [],
        )
        for i in range(n)
    ]


def with_export(env: TieringEnv, catalog: dict[str, Any], namespace: str | None = None) -> None:
    """Add an ``export`` section to the env's config file."""
    doc = yaml.safe_load(env.config_path.read_text())
    doc["export"] = {"catalog": catalog} | ({"namespace": namespace} if namespace else {})
    env.config_path.write_text(yaml.safe_dump(doc))


def sqlite_catalog(root: Path, warehouse: str | None = None) -> dict[str, Any]:
    wh = root / "warehouse"
    wh.mkdir(exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{root / 'iceberg.db'}", "warehouse": warehouse or f"file://{wh}"}


def build_partition(env: TieringEnv, topic: str = "orders", partition: int = 0) -> PartitionWriter:
    """Segments of every codec, with an aborted transaction spanning a roll, a committed one,
    null keys and values, headers; the last segment stays active (never tiered)."""
    w = env.writer(topic, partition)
    for codec in CODECS:
        w.codec = codec
        w.append(rows(6, f"c{codec}"))
        w.begin_transaction(7 + codec, 0)
        w.begin_transaction(100 + codec, 0)
        w.append(rows(3, f"abort{codec}"), producer_id=7 + codec)
        w.append(rows(2, f"commit{codec}"), producer_id=100 + codec)
        w.roll()
        w.append(rows(2, f"abort{codec}b"), producer_id=7 + codec)
        w.commit(100 + codec)
        w.abort(7 + codec)
        w.append(rows(3, f"plain{codec}"))
        w.roll()
    w.append(rows(1, "active"))
    w.set_high_watermark()
    return w
