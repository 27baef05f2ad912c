"""The ``metadata:`` section: the store's URL (a relative SQLite file beside the config, the
password from the environment), its lease and database timeouts; and the one way a URL is shown,
its secrets masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import parse_config
from tiering_core.config.metadata import MetadataConfig, parse_metadata_config, safe_url
from tiering_core.errors import ConfigError


def test_the_metadata_store_timeouts_have_defaults_and_name_their_key(tmp_path: Path) -> None:
    from tiering_core.config import DatabaseTimeouts

    doc = base_doc(tmp_path)
    doc["metadata"] = {"url": "postgresql+psycopg://tiering@db:5432/meta"}
    timeouts = parse_config(doc).metadata.timeouts
    assert timeouts == DatabaseTimeouts()
    assert (timeouts.connect_timeout_seconds, timeouts.statement_timeout_ms, timeouts.dead_peer_ms) == (
        10,
        60_000,
        30_000,
    )
    doc["metadata"].update(
        connect_timeout_seconds=3,
        statement_timeout_ms=0,  # no limit
        keepalives_idle_seconds=4,
        keepalives_interval_seconds=2,
        keepalives_count=5,
    )
    assert parse_config(doc).metadata.timeouts == DatabaseTimeouts(3, 0, 4, 2, 5)
    assert parse_config(doc).metadata.timeouts.dead_peer_ms == 14_000
    for key, bad in (
        ("connect_timeout_seconds", 1),  # libpq waits at least 2 s
        ("statement_timeout_ms", -1),
        ("keepalives_idle_seconds", 0),
        ("keepalives_interval_seconds", "soon"),
        ("keepalives_count", 0),
    ):
        broken = {**doc["metadata"], key: bad}
        with pytest.raises(ConfigError, match=rf"^metadata\.{key}: "):
            parse_config({**doc, "metadata": broken})
    # The same libpq parameters in the URL: one place for them, the key named.
    for query, key in (
        ("connect_timeout=5", "connect_timeout_seconds"),
        ("keepalives_idle=9", "keepalives_idle_seconds"),
        ("tcp_user_timeout=1000", "keepalives_idle_seconds"),
    ):
        url = f"postgresql+psycopg://tiering@db:5432/meta?{query}"
        with pytest.raises(
            ConfigError, match=rf"metadata\.url: sets {query.split('=')[0]}; set metadata\.{key} instead"
        ):
            parse_config({**doc, "metadata": {"url": url}})
    assert parse_config({**doc, "metadata": {"url": "postgresql+psycopg://t@db/meta?sslmode=require"}})


def test_the_metadata_password_can_come_from_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.engine import make_url

    doc = base_doc(tmp_path)
    doc["metadata"] = {"url": "postgresql+psycopg://tiering@db:5432/meta", "password_env": "META_PW"}
    monkeypatch.setenv("META_PW", "p@ss:w/rd")
    url = make_url(parse_config(doc).metadata.url)
    assert (url.username, url.password, url.host, url.database) == ("tiering", "p@ss:w/rd", "db", "meta")
    assert "p@ss" not in repr(parse_config(doc)) and "tiering:***@db" in repr(parse_config(doc))
    monkeypatch.delenv("META_PW")
    with pytest.raises(ConfigError, match=r"metadata\.password_env: the environment variable META_PW is not set"):
        parse_config(doc)
    monkeypatch.setenv("META_PW", "x")
    doc["metadata"]["url"] = "postgresql+psycopg://tiering:inline@db:5432/meta"
    with pytest.raises(ConfigError, match="keep one of them") as err:
        parse_config(doc)
    assert "inline" not in str(err.value)
    doc["metadata"]["url"] = f"sqlite:///{tmp_path / 'meta.db'}"
    with pytest.raises(ConfigError, match="names no user"):
        parse_config(doc)


def test_a_relative_sqlite_file_resolves_beside_the_config_and_other_forms_stay(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    assert parse_metadata_config({"url": "sqlite:///meta.db"}, lambda p: conf / p).url == f"sqlite:///{conf}/meta.db"
    for url in ("sqlite:////var/lib/meta.db", "sqlite:///:memory:", "sqlite:///file:meta?mode=ro&uri=true"):
        assert parse_metadata_config({"url": url}, lambda p: conf / p).url == url
    config = parse_metadata_config({"url": "sqlite:///m.db", "lease_ms": 5}, lambda p: conf / p)
    assert config.lease_ms == 5
    with pytest.raises(ConfigError, match=r"^metadata\.lease_ms"):
        parse_metadata_config({"url": "sqlite:///m.db", "lease_ms": 0}, lambda p: conf / p)
    with pytest.raises(ConfigError, match=r"metadata\.user: unknown key"):
        parse_metadata_config({"url": "sqlite:///m.db", "user": "x"}, lambda p: conf / p)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://tiering:s3cret@db:5432/meta", "postgresql+psycopg://tiering:***@db:5432/meta"),
        (
            "postgresql+psycopg://tiering@db/meta?password=s3cret&sslmode=require",
            "postgresql+psycopg://tiering@db/meta?password=***&sslmode=require",
        ),
        (
            "postgresql+psycopg://t@db/meta?sslpassword=s3cret&application_name=tiering&api_token=s3cret",
            "postgresql+psycopg://t@db/meta?api_token=***&application_name=tiering&sslpassword=***",  # sorted
        ),
        ("sqlite:////var/lib/meta.db", "sqlite:////var/lib/meta.db"),
        ("not a url at all", "<unparsable database url>"),
    ],
)
def test_a_url_is_shown_with_every_secret_masked(url: str, shown: str) -> None:
    assert safe_url(url) == shown
    assert "s3cret" not in safe_url(url)


def test_the_config_s_repr_never_shows_the_password() -> None:
    config = MetadataConfig("postgresql+psycopg://tiering:s3cret@db/meta?password=s3cret")
    assert "s3cret" not in repr(config) and "tiering:***@db/meta?password=***" in repr(config)
    given = MetadataConfig("postgresql+psycopg://tiering@db/meta").with_password("p@ss", "TIERING_DB_PASSWORD")
    assert "p@ss" not in repr(given) and given.url.startswith("postgresql+psycopg://tiering:")
