"""The ``metrics:`` section: the static bearer token a Prometheus scraper presents at
``/tiering/metrics`` instead of an Airflow login, and ``grafana_url``, the Grafana the Tiering page
links to (absent: no link).

The file names where the token is (an environment variable of the API server, or a file such as
a mounted secret), never the token itself, and the token is read when a scrape asks, not when
the config is parsed: every other process (workers, the scheduler) parses the same file without
the secret, and a rotated file takes effect at the next scrape.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiering_core.config.parsing import as_str, check_keys, require_mapping
from tiering_core.errors import ConfigError

#: A token shorter than this is refused: a scraper's token must not be guessable.
MIN_TOKEN_LENGTH = 16


@dataclass(frozen=True)
class MetricsConfig:
    """Where the scrapers' bearer token is: ``bearer_token_env`` (an environment variable) or
    ``bearer_token_file``; neither: only Airflow's own authentication is accepted."""

    bearer_token_env: str | None = None
    bearer_token_file: Path | None = None
    #: The Grafana (http or https, no credentials in it) the Tiering page links to; None: no link.
    grafana_url: str | None = None

    @property
    def token_source(self) -> str | None:
        """Where the token is, for messages (never the token)."""
        if self.bearer_token_env is not None:
            return f"metrics.bearer_token_env ({self.bearer_token_env})"
        if self.bearer_token_file is not None:
            return f"metrics.bearer_token_file ({self.bearer_token_file})"
        return None

    def bearer_token(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The token, read now; None when none is configured. ConfigError naming its source (not
        its value) when the variable is unset, the file unreadable or the token too short."""
        if self.bearer_token_env is not None:
            token = (os.environ if environ is None else environ).get(self.bearer_token_env, "").strip()
            if not token:
                raise ConfigError(f"{self.token_source}: the environment variable is not set")
        elif self.bearer_token_file is not None:
            try:
                token = self.bearer_token_file.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{self.token_source}: cannot read the token: {exc}") from None
        else:
            return None
        if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
            raise ConfigError(
                f"{self.token_source}: the token must be at least {MIN_TOKEN_LENGTH} characters without spaces"
            )
        return token


def parse_grafana_url(raw: object) -> str:
    """``metrics.grafana_url``: an absolute http(s) URL without user or password (the page shows
    it to every viewer), its trailing slash dropped."""
    url = as_str(raw, "metrics.grafana_url").strip()
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise ConfigError("metrics.grafana_url: not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("metrics.grafana_url: an http:// or https:// URL with a host is required")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("metrics.grafana_url: must not hold a user or password (the page shows it)")
    if parts.query or parts.fragment:
        raise ConfigError("metrics.grafana_url: the base URL only, without a query or fragment")
    return url.rstrip("/")


def parse_metrics_config(raw: Any, resolve: Callable[[str], Path]) -> MetricsConfig:
    """``metrics: {bearer_token_env: NAME}`` or ``metrics: {bearer_token_file: PATH}``, and
    optionally ``grafana_url``."""
    section = require_mapping(raw if raw is not None else {}, "metrics")
    check_keys(section, {"bearer_token_env", "bearer_token_file", "grafana_url"}, "metrics")
    if "bearer_token_env" in section and "bearer_token_file" in section:
        raise ConfigError("metrics: set bearer_token_env or bearer_token_file, not both")
    env = section.get("bearer_token_env")
    path = section.get("bearer_token_file")
    return MetricsConfig(
        bearer_token_env=None if env is None else as_str(env, "metrics.bearer_token_env"),
        bearer_token_file=None if path is None else resolve(as_str(path, "metrics.bearer_token_file")),
        grafana_url=None if section.get("grafana_url") is None else parse_grafana_url(section["grafana_url"]),
    )
