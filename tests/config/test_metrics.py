"""The ``metrics:`` section names where the scrapers' bearer token is, never the token; the token
is read when asked (so processes without it parse the same file), and a missing or weak one is a
ConfigError naming its source, not its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import MetricsConfig, parse_config
from tiering_core.errors import ConfigError

TOKEN = "s3cr3t-scraper-token-0123456789"


def test_no_section_means_no_token(tmp_path: Path) -> None:
    config = parse_config(base_doc(tmp_path), base_dir=tmp_path)
    assert config.metrics == MetricsConfig() and config.metrics.bearer_token() is None


def test_the_token_comes_from_an_environment_variable_read_when_asked(tmp_path: Path) -> None:
    doc = {**base_doc(tmp_path), "metrics": {"bearer_token_env": "SCRAPE_TOKEN"}}
    config = parse_config(doc, base_dir=tmp_path)  # parsed without the variable: a worker has none
    assert config.metrics.bearer_token({"SCRAPE_TOKEN": f" {TOKEN}\n"}) == TOKEN
    with pytest.raises(ConfigError, match=r"metrics.bearer_token_env \(SCRAPE_TOKEN\): .* not set"):
        config.metrics.bearer_token({})


def test_the_token_comes_from_a_file_beside_the_config_read_when_asked(tmp_path: Path) -> None:
    doc = {**base_doc(tmp_path), "metrics": {"bearer_token_file": "secrets/scrape-token"}}
    config = parse_config(doc, base_dir=tmp_path)
    assert config.metrics.bearer_token_file == tmp_path / "secrets" / "scrape-token"
    with pytest.raises(ConfigError, match=r"metrics.bearer_token_file .*cannot read the token"):
        config.metrics.bearer_token()
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "scrape-token").write_text(TOKEN + "\n")
    assert config.metrics.bearer_token() == TOKEN
    (tmp_path / "secrets" / "scrape-token").write_text("rotated-" + TOKEN)
    assert config.metrics.bearer_token() == "rotated-" + TOKEN  # the next scrape sees a rotation


def test_a_weak_token_is_refused_without_showing_it(tmp_path: Path) -> None:
    config = parse_config({**base_doc(tmp_path), "metrics": {"bearer_token_env": "T"}}, base_dir=tmp_path)
    for weak in ("short-token", "has a space in the middle"):
        with pytest.raises(ConfigError, match="at least 16 characters") as raised:
            config.metrics.bearer_token({"T": weak})
        assert weak not in str(raised.value)


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"bearer_token": TOKEN}, "metrics.bearer_token: unknown key"),
        ({"bearer_token_env": "A", "bearer_token_file": "b"}, "not both"),
        ({"bearer_token_env": ""}, "metrics.bearer_token_env: expected a non-empty string"),
        ([], "metrics: expected a mapping"),
    ],
)
def test_bad_metrics_section_names_the_key(tmp_path: Path, section: object, named: str) -> None:
    with pytest.raises(ConfigError, match=named) as raised:
        parse_config({**base_doc(tmp_path), "metrics": section}, base_dir=tmp_path)
    assert TOKEN not in str(raised.value)


def test_grafana_url_is_the_page_s_link_base_without_a_trailing_slash(tmp_path: Path) -> None:
    doc = {**base_doc(tmp_path), "metrics": {"grafana_url": "https://grafana.example.com/d/tiering/"}}
    assert parse_config(doc, base_dir=tmp_path).metrics.grafana_url == "https://grafana.example.com/d/tiering"
    assert parse_config(base_doc(tmp_path), base_dir=tmp_path).metrics.grafana_url is None


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("grafana.example.com", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("https://admin:hunter2-secret@grafana.example.com", "must not hold a user or password"),
        ("https://grafana.example.com/?orgId=1", "without a query"),
        ("http://grafana.example.com:99999", "not a URL"),
    ],
)
def test_a_bad_grafana_url_is_an_error_naming_the_key_and_never_its_credentials(
    tmp_path: Path, url: str, named: str
) -> None:
    with pytest.raises(ConfigError, match=named) as raised:
        parse_config({**base_doc(tmp_path), "metrics": {"grafana_url": url}}, base_dir=tmp_path)
    assert "metrics.grafana_url" in str(raised.value) and "hunter2" not in str(raised.value)
