"""What the config tests share: the contract's example config as a document."""

from __future__ import annotations

from pathlib import Path


def base_doc(tmp_path: Path) -> dict:
    return {
        "log_dirs": [str(tmp_path / "kafka")],
        "metadata": {"url": f"sqlite:///{tmp_path / 'meta.db'}"},
        "remote": {"backend": "s3", "bucket": "kafka-tiered", "prefix": "prod/", "endpoint_url": "http://127.0.0.1:9"},
        "topics": {
            "*": {"remote.storage.enable": True, "retention.ms": 604800000, "retention.bytes": -1},
            "orders": {"retention.ms": 86400000},
        },
    }
