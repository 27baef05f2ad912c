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
from tiering_core.humanize import fmt_bytes
from tiering_core.storage.config import COMPRESSION_MODES, DEFAULT_CHUNK_SIZE, EncryptionConfig, RemoteConfig
from tiering_core.storage.layout import validate_deployment_prefix
from tiering_core.storage.manifest import (
    MAX_CHUNK_SIZE,
    MAX_KEY_ID,
    MAX_MANIFEST_BYTES,
    MAX_SEGMENT_BYTES,
    MIN_CHUNK_SIZE,
    max_chunk_index_bytes,
)


def _endpoint_url(section: Mapping[str, Any]) -> str | None:
    url = optional_str(section, "endpoint_url", "remote.endpoint_url")
    if url is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ConfigError(f"remote.endpoint_url: {shown(url)} is not an http:// or https:// URL")
    return url


def _key_id(value: Any, key: str) -> str:
    key_id = as_str(value, key)
    if not 0 < len(key_id) <= MAX_KEY_ID or not key_id.isprintable():
        raise ConfigError(f"{key}: a key id is 1 to {MAX_KEY_ID} printable characters")
    return key_id


def _check_chunk_size(chunk_size: int) -> None:
    """A chunk size at which the largest log Kafka writes could need a manifest its readers
    refuse is refused here, naming the smallest that cannot (the copy refuses any such manifest)."""
    if chunk_size > MAX_CHUNK_SIZE:
        raise ConfigError(f"remote.chunk_size: {chunk_size} is above {MAX_CHUNK_SIZE}")
    if max_chunk_index_bytes(MAX_SEGMENT_BYTES, chunk_size) <= MAX_MANIFEST_BYTES:
        return
    smallest = next(
        size
        for size in range(chunk_size + 1, MAX_CHUNK_SIZE + 1)
        if max_chunk_index_bytes(MAX_SEGMENT_BYTES, size) <= MAX_MANIFEST_BYTES
    )
    raise ConfigError(
        f"remote.chunk_size: {chunk_size} is too small: a segment of Kafka's largest segment.bytes "
        f"({MAX_SEGMENT_BYTES}) could need a manifest above the {fmt_bytes(MAX_MANIFEST_BYTES)} readers "
        f"accept; use at least {smallest}"
    )


def _encryption(raw: Any, resolve: Callable[[str], Path]) -> EncryptionConfig | None:
    """``remote.encryption``: an RSA key ring (``key_id``, ``public_key_file``,
    ``private_key_files``) or an AWS KMS key (``kms_key_id``); the files are read when the
    storage is built."""
    if raw is None:
        return None
    where = "remote.encryption"
    section = require_mapping(raw, where)
    check_keys(
        section,
        {"key_id", "public_key_file", "private_key_files", "kms_key_id", "kms_endpoint_url", "kms_region"},
        where,
    )
    private_raw = section.get("private_key_files") or {}
    private = require_mapping(private_raw, f"{where}.private_key_files")
    private_key_files = tuple(
        (_key_id(key_id, f"{where}.private_key_files"), resolve(as_str(path, f"{where}.private_key_files.{key_id}")))
        for key_id, path in sorted(private.items(), key=lambda item: str(item[0]))
    )
    kms_key_id = None if section.get("kms_key_id") is None else _key_id(section["kms_key_id"], f"{where}.kms_key_id")
    key_id = None if section.get("key_id") is None else _key_id(section["key_id"], f"{where}.key_id")
    public = section.get("public_key_file")
    if kms_key_id is not None and (key_id is not None or public is not None):
        raise ConfigError(f"{where}: kms_key_id or key_id with public_key_file encrypts new segments, not both")
    if kms_key_id is None and (key_id is None) != (public is None):
        raise ConfigError(f"{where}: key_id and public_key_file go together")
    if kms_key_id is None and key_id is None and not private_key_files:
        raise ConfigError(f"{where}: needs kms_key_id, or key_id with public_key_file, or private_key_files")
    kms_url = optional_str(section, "kms_endpoint_url", f"{where}.kms_endpoint_url")
    if kms_url is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", kms_url):
        raise ConfigError(f"{where}.kms_endpoint_url: {shown(kms_url)} is not an http:// or https:// URL")
    return EncryptionConfig(
        key_id=key_id,
        public_key_file=None if public is None else resolve(as_str(public, f"{where}.public_key_file")),
        private_key_files=private_key_files,
        kms_key_id=kms_key_id,
        kms_endpoint_url=kms_url,
        kms_region=optional_str(section, "kms_region", f"{where}.kms_region"),
    )


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
            "chunk_size",
            "compression",
            "encryption",
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
        chunk_size=as_int(remote_raw.get("chunk_size", DEFAULT_CHUNK_SIZE), "remote.chunk_size", MIN_CHUNK_SIZE),
        compression=as_str(remote_raw.get("compression", "none"), "remote.compression"),
        encryption=_encryption(remote_raw.get("encryption"), resolve),
    )
    _check_chunk_size(remote.chunk_size)
    if remote.compression not in COMPRESSION_MODES:
        raise ConfigError(
            f"remote.compression: {shown(remote.compression)} is not one of {', '.join(COMPRESSION_MODES)}"
        )
    return remote
