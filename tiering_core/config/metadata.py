"""The ``metadata:`` section: the metadata store's URL, lease length and database timeouts, and
the one way a URL is shown (its secrets masked).

The store (``tiering_core.metadata``) is built from these values; they live here, below it, so
that the config and the store share them without importing each other. sqlalchemy is imported
only when a URL is parsed, as the rest of the config does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

from tiering_core.config.parsing import as_int, as_str, check_keys, optional_str, require_mapping
from tiering_core.errors import ConfigError

#: Query parameters that carry a secret (``?password=`` for psycopg, ``sslpassword``, ...).
_SECRET_PARAMETER = re.compile(r"pass|pwd|secret|token|key", re.IGNORECASE)


def safe_url(url: str) -> str:
    """The URL with its password masked, for error messages and logs: the one in the user info
    and any query parameter that carries a secret (``?password=...``)."""
    from sqlalchemy.engine import make_url

    try:
        rendered = make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparsable database url>"
    base, mark, query = rendered.partition("?")
    masked = (
        f"{name}=***" if _SECRET_PARAMETER.search(unquote_plus(name)) else f"{name}{sep}{value}"
        for name, sep, value in (item.partition("=") for item in query.split("&"))
    )
    return base + mark + "&".join(masked) if mark else base


@dataclass(frozen=True)
class DatabaseTimeouts:
    """How long the metadata store waits on a PostgreSQL server (``metadata:`` keys of the same
    names), so that a database that stops answering fails a request in bounded time instead of
    holding its thread (a worker's, the Tiering page's readers) for minutes. SQLite ignores them.

    ``connect_timeout_seconds``: to connect, handshake included (libpq's ``connect_timeout``, at
    least 2). ``statement_timeout_ms``: the server cancels a statement that runs longer (lock waits
    included; 0: no limit). The TCP keepalive probes (``keepalives_*``) find a dead connection
    while it is idle, and the same span bounds data left unacknowledged (``tcp_user_timeout``),
    so a server that vanishes mid-request is given up after ``dead_peer_ms``.
    """

    connect_timeout_seconds: int = 10
    statement_timeout_ms: int = 60_000
    keepalives_idle_seconds: int = 15
    keepalives_interval_seconds: int = 5
    keepalives_count: int = 3

    @property
    def dead_peer_ms(self) -> int:
        """After this long without an answer a connection is dead: the keepalive probes' span."""
        return 1000 * (self.keepalives_idle_seconds + self.keepalives_interval_seconds * self.keepalives_count)


#: The ``metadata:`` keys of ``DatabaseTimeouts`` -> (minimum, libpq's parameter a URL may set instead).
_TIMEOUT_KEYS: dict[str, tuple[int, str]] = {
    "connect_timeout_seconds": (2, "connect_timeout"),
    "statement_timeout_ms": (0, "options"),
    "keepalives_idle_seconds": (1, "keepalives_idle"),
    "keepalives_interval_seconds": (1, "keepalives_interval"),
    "keepalives_count": (1, "keepalives_count"),
}
#: libpq parameters the timeouts set: a URL that sets them too is refused, naming the key to use.
_URL_TIMEOUT_PARAMETERS = {param: key for key, (_, param) in _TIMEOUT_KEYS.items() if param != "options"} | {
    "keepalives": "keepalives_idle_seconds",
    "tcp_user_timeout": "keepalives_idle_seconds",
}


def _database_timeouts(section: Mapping[str, Any], url: str) -> DatabaseTimeouts:
    """The ``metadata:`` timeouts; a PostgreSQL URL may not set the same libpq parameters."""
    values = {
        key: as_int(section[key], f"metadata.{key}", minimum)
        for key, (minimum, _) in _TIMEOUT_KEYS.items()
        if key in section
    }
    if url.startswith("postgresql"):
        from sqlalchemy.engine import make_url

        for parameter in make_url(url).query:
            if parameter in _URL_TIMEOUT_PARAMETERS:
                raise ConfigError(
                    f"metadata.url: sets {parameter}; set metadata.{_URL_TIMEOUT_PARAMETERS[parameter]} instead"
                )
    return DatabaseTimeouts(**values)


@dataclass(frozen=True)
class MetadataConfig:
    url: str
    lease_ms: int = 600_000
    timeouts: DatabaseTimeouts = field(default_factory=DatabaseTimeouts)

    def __repr__(self) -> str:  # the URL may hold the password (from the file, the environment)
        return f"MetadataConfig(url={safe_url(self.url)!r}, lease_ms={self.lease_ms}, timeouts={self.timeouts!r})"

    def with_password(self, password: str, source: str) -> MetadataConfig:
        """The same store with the password from ``source`` (an environment variable, an Airflow
        connection), so the YAML file need not hold it; the URL must not carry one too."""
        from sqlalchemy.engine import make_url

        parsed = make_url(self.url)
        if parsed.password is not None:
            raise ConfigError(f"metadata.url: has a password and {source} gives one too: keep one of them")
        if not parsed.username:
            raise ConfigError(f"metadata.url: names no user for the password {source} gives")
        return replace(self, url=parsed.set(password=password).render_as_string(hide_password=False))


def parse_metadata_config(raw: Any, resolve: Callable[[str], Path]) -> MetadataConfig:
    """The ``metadata:`` section; a relative SQLite file resolves beside the config, and
    ``password_env`` names the environment variable holding the password."""
    meta_raw = require_mapping(raw, "metadata")
    check_keys(meta_raw, {"url", "lease_ms", "password_env", *_TIMEOUT_KEYS}, "metadata")
    url = as_str(meta_raw.get("url"), "metadata.url")
    sqlite_path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    # A relative file resolves beside the config; in-memory databases and URI forms stay as
    # written, for the store to judge (it refuses in-memory ones).
    if sqlite_path and not sqlite_path.startswith(("/", ":memory:", "file:")):
        url = "sqlite:///" + str(resolve(sqlite_path))
    metadata = MetadataConfig(
        url=url,
        lease_ms=as_int(meta_raw.get("lease_ms", 600_000), "metadata.lease_ms", 1),
        timeouts=_database_timeouts(meta_raw, url),
    )
    password_env = optional_str(meta_raw, "password_env", "metadata.password_env")
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise ConfigError(f"metadata.password_env: the environment variable {password_env} is not set")
        metadata = metadata.with_password(password, f"metadata.password_env ({password_env})")
    return metadata
