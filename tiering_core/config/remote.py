"""The ``remote:`` section, read into the storage's own settings (``storage.config.RemoteConfig``):
the backend, where its objects live and how its calls are retried and bounded."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tiering_core.config.parsing import (
    as_int,
    as_str,
    check_keys,
    optional_str,
    positive_number,
    require_mapping,
    shown,
)
from tiering_core.errors import ConfigError
from tiering_core.storage.config import RemoteConfig
from tiering_core.storage.layout import validate_deployment_prefix


def _endpoint_url(section: Mapping[str, Any]) -> str | None:
    url = optional_str(section, "endpoint_url", "remote.endpoint_url")
    if url is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ConfigError(f"remote.endpoint_url: {shown(url)} is not an http:// or https:// URL")
    return url


def parse_remote_config(raw: Any, resolve: Callable[[str], Path]) -> RemoteConfig:
    """The ``remote:`` section; a filesystem backend's relative ``root`` resolves beside the config."""
    remote_raw = require_mapping(raw, "remote")
    check_keys(
        remote_raw,
        {
            "backend",
            "bucket",
            "prefix",
            "endpoint_url",
            "region",
            "root",
            "multipart_threshold_bytes",
            "multipart_part_size_bytes",
            "max_concurrency",
            "max_attempts",
            "timeout_seconds",
            "deadline_seconds",
        },
        "remote",
    )
    backend = as_str(remote_raw.get("backend"), "remote.backend")
    if backend not in ("s3", "filesystem"):
        raise ConfigError(f"remote.backend: {shown(backend)} is not one of s3, filesystem")
    prefix = remote_raw.get("prefix")
    if prefix is None:
        prefix = ""
    if not isinstance(prefix, str) or ".." in prefix.split("/") or prefix.startswith("/"):
        raise ConfigError(f"remote.prefix: {shown(prefix)} is not a relative key prefix")
    validate_deployment_prefix(prefix)
    bucket = remote_raw.get("bucket")
    root = remote_raw.get("root")
    if backend == "s3":
        bucket = as_str(bucket, "remote.bucket")
        if len(bucket) < 3:
            raise ConfigError(f"remote.bucket: {shown(bucket)} is shorter than 3 characters")
    else:
        root = resolve(as_str(root, "remote.root"))
    timeout = positive_number(remote_raw.get("timeout_seconds", 60.0), "remote.timeout_seconds")
    deadline = remote_raw.get("deadline_seconds")
    if deadline is not None:
        deadline = positive_number(deadline, "remote.deadline_seconds")
        if deadline < timeout:
            raise ConfigError(
                f"remote.deadline_seconds: {deadline} is shorter than remote.timeout_seconds {timeout} "
                "(a single attempt could not finish)"
            )
    remote = RemoteConfig(
        backend=backend,
        bucket=bucket if backend == "s3" else None,
        prefix=prefix,
        endpoint_url=_endpoint_url(remote_raw),
        region=optional_str(remote_raw, "region", "remote.region"),
        root=root if isinstance(root, Path) else None,
        multipart_threshold_bytes=as_int(
            remote_raw.get("multipart_threshold_bytes", 8 * 1024 * 1024),
            "remote.multipart_threshold_bytes",
            5 * 1024 * 1024,
        ),
        multipart_part_size_bytes=as_int(
            remote_raw.get("multipart_part_size_bytes", 8 * 1024 * 1024),
            "remote.multipart_part_size_bytes",
            5 * 1024 * 1024,
        ),
        max_concurrency=as_int(remote_raw.get("max_concurrency", 4), "remote.max_concurrency", 1),
        max_attempts=as_int(remote_raw.get("max_attempts", 5), "remote.max_attempts", 1),
        timeout_seconds=timeout,
        deadline_seconds=deadline,
    )
    return remote
