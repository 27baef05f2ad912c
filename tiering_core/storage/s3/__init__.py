"""The S3 backend: importing it needs boto3, so only the factory's s3 branch imports it."""

from __future__ import annotations

from tiering_core.storage.s3.client import S3RemoteStorage

__all__ = ["S3RemoteStorage"]
