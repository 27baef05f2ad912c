"""boto3 sessions that share one botocore data loader per process.

A new boto3 session parses botocore's JSON models again (the S3 service model, its endpoint rules,
the partitions) before its first client: about 0.25 s of CPU per S3 client, paid by every run,
task and command that opens the tier. The models never change within a process, so every session
made here reads them through one loader and parses each file once; credentials, region and
configuration stay per session, as before.
"""

from __future__ import annotations

import functools
import os

import boto3.session
import botocore.loaders
import botocore.session


class _SearchPaths(list[str]):
    """The loader's search paths: each path once, however many sessions add boto3's data path."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


@functools.cache
def shared_loader() -> botocore.loaders.Loader:
    """The process's one loader, searching what botocore's own would (``AWS_DATA_PATH`` first)."""
    configured = botocore.session.Session().get_config_variable("data_path") or ""
    paths = _SearchPaths(os.path.expanduser(p) for p in str(configured).split(os.pathsep) if p)
    return botocore.loaders.Loader(extra_search_paths=paths)


def new_session(
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    aws_session_token: str | None = None,
) -> boto3.session.Session:
    """A boto3 session of its own (credentials from the arguments, else the AWS chain) whose
    botocore models come from the shared loader."""
    core = botocore.session.Session()
    core.register_component("data_loader", shared_loader())
    return boto3.session.Session(
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
        aws_session_token=aws_session_token,
        botocore_session=core,
    )
