"""Sessions sharing one botocore loader: models parsed once per process, credentials per session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.services import S3Endpoint
from tiering_core.storage.s3.client import S3RemoteStorage
from tiering_core.storage.s3.session import new_session, shared_loader


def test_every_session_reads_the_models_through_one_loader_and_keeps_its_own_credentials() -> None:
    first = new_session("AKIDFIRST", "first-secret")
    second = new_session("AKIDSECOND", "second-secret", "second-token")
    assert first._session.get_component("data_loader") is shared_loader()  # boto3 names no public accessor
    assert second._session.get_component("data_loader") is shared_loader()  # boto3 names no public accessor
    first_credentials, second_credentials = first.get_credentials(), second.get_credentials()
    assert first_credentials is not None and second_credentials is not None
    assert first_credentials.access_key == "AKIDFIRST"
    frozen = second_credentials.get_frozen_credentials()
    assert (frozen.access_key, frozen.secret_key, frozen.token) == ("AKIDSECOND", "second-secret", "second-token")


def test_the_loader_s_search_paths_do_not_grow_with_the_sessions_made() -> None:
    new_session()
    before = list(shared_loader().search_paths)
    for _ in range(50):
        new_session()
    assert shared_loader().search_paths == before
    assert len(set(before)) == len(before)


def test_the_s3_model_is_parsed_once_however_many_clients_are_made(
    s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted at the one place botocore parses its JSON files."""
    bucket = s3_endpoint.new_bucket()
    S3RemoteStorage(bucket, endpoint_url=s3_endpoint.url, region="us-east-1")  # the models are loaded
    parsed: list[str] = []
    real_loads = json.loads

    def counting_loads(text: str | bytes, *args: object, **kwargs: object) -> object:
        parsed.append(str(text)[:40])
        return real_loads(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("botocore.loaders.json.loads", counting_loads)
    for i in range(5):
        store = S3RemoteStorage(
            bucket,
            endpoint_url=s3_endpoint.url,
            region="us-east-1",
            aws_access_key_id=f"AKID{i}",
            aws_secret_access_key="s",
        )
        store.put_object("k", b"v")  # the client works: moto takes any key
    assert parsed == []


def test_aws_data_path_is_searched_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model directory named by AWS_DATA_PATH comes before botocore's own, as with botocore's loader."""
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))
    shared_loader.cache_clear()
    try:
        assert shared_loader().search_paths[0] == str(tmp_path)
    finally:
        monkeypatch.delenv("AWS_DATA_PATH")
        shared_loader.cache_clear()
