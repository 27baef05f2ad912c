"""What the end-to-end quota tests share: a tiering environment whose S3 endpoint is moto's server
behind a byte-counting proxy, with ``quotas:`` in its config, and a partition of segments large
enough for the caps to bite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.engine_support import TieringEnv
from tiering_core.kafka.log_writer import PartitionWriter

MiB = 1 << 20
COPY_KEY = "remote.log.manager.copy.max.bytes.per.second"
FETCH_KEY = "remote.log.manager.fetch.max.bytes.per.second"


def quota_env(tmp_path: Path, bucket: str, endpoint_url: str, quotas: dict[str, int]) -> TieringEnv:
    """A SQLite, S3 (``endpoint_url``) environment whose config caps the broker by ``quotas``;
    objects of 5 MiB and more go up as multipart uploads of 5 MiB parts, so parts take tokens too."""
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote: dict[str, Any] = {
        "backend": "s3",
        "bucket": bucket,
        "prefix": "t/",
        "endpoint_url": endpoint_url,
        "region": "us-east-1",
        "multipart_threshold_bytes": 5 * MiB,
        "multipart_part_size_bytes": 5 * MiB,
    }
    env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    env.write_config()
    set_quotas(env, quotas)
    return env


def set_quotas(env: TieringEnv, quotas: dict[str, int]) -> None:
    doc = yaml.safe_load(env.config_path.read_text())
    doc["quotas"] = quotas
    env.config_path.write_text(yaml.safe_dump(doc))


def write_partition(env: TieringEnv, megabytes: int, *, segment_mb: float = 1.5) -> PartitionWriter:
    """A partition of about ``megabytes`` MiB in closed segments of about ``segment_mb`` MiB, all
    below the high watermark (copyable), plus an empty active segment."""
    w = env.writer(segment_bytes=int(segment_mb * MiB))
    w.append_records(megabytes * 1000, value_size=1000, per_batch=50)
    w.roll()
    w.set_high_watermark()
    return w
