"""The ``export:`` section: the Iceberg catalog the tiered log is exported to as tables.

``catalog_name`` (default ``tiering``) is the catalog's name: pyiceberg's SQL catalog, Spark's
JDBC catalog and Trino scope their tables by it, so every reader must name the catalog so too
(docs/export.md shows how). The catalog's properties are pyiceberg's, passed as given (``type: sql`` with a SQLAlchemy
``uri`` by default; ``rest``, ``glue``, ... work by their own properties). What the file does not
say about an S3 warehouse comes from the ``remote`` section and the AWS chain, as the tier's own
S3 client is built (``tiering_core.storage.factory``): ``s3.endpoint`` and ``s3.region`` from
``remote.endpoint_url`` and ``remote.region``, path-style access with an endpoint (MinIO, moto),
and credentials resolved when the catalog is loaded, never stored in the parsed config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tiering_core.config.export_topics import (
    SchemaRegistryConfig,
    TopicExport,
    parse_typed_export,
)
from tiering_core.config.parsing import as_str, check_keys, require_mapping, shown
from tiering_core.errors import ConfigError

DEFAULT_NAMESPACE = "kafka"
DEFAULT_CATALOG_TYPE = "sql"
DEFAULT_CATALOG_NAME = "tiering"

#: pyiceberg's FileIO property names for an S3 warehouse.
S3_ENDPOINT = "s3.endpoint"
S3_REGION = "s3.region"
S3_ACCESS_KEY_ID = "s3.access-key-id"
S3_SECRET_ACCESS_KEY = "s3.secret-access-key"
S3_SESSION_TOKEN = "s3.session-token"
S3_PATH_STYLE_ACCESS = "s3.path-style-access"
PY_IO_IMPL = "py-io-impl"
#: The FileIO the export writes and lists its data files with (pyarrow's file systems).
PYARROW_FILE_IO = "pyiceberg.io.pyarrow.PyArrowFileIO"


@dataclass(frozen=True)
class ExportConfig:
    """Where exported tables live: ``namespace`` (tables are ``<namespace>.<topic>``) in the
    catalog named ``catalog_name`` of ``catalog`` (pyiceberg's properties as the file gives them,
    as strings)."""

    namespace: str = DEFAULT_NAMESPACE
    catalog: Mapping[str, str] = field(default_factory=dict)
    catalog_name: str = DEFAULT_CATALOG_NAME
    #: Per topic: its key's and value's formats and its table's name (``export.topics``).
    topics: Mapping[str, TopicExport] = field(default_factory=dict)
    schema_registry: SchemaRegistryConfig | None = None

    def topic(self, topic: str) -> TopicExport:
        """How ``topic`` exports (the default: key and value as bytes, the table named after it)."""
        return self.topics.get(topic, TopicExport())

    @property
    def warehouse(self) -> str | None:
        return self.catalog.get("warehouse")

    def __repr__(self) -> str:  # the catalog's URI or keys may hold secrets
        return (
            f"ExportConfig(namespace={self.namespace!r}, catalog_name={self.catalog_name!r}, "
            f"catalog keys={sorted(self.catalog)}, topics={dict(self.topics)!r})"
        )


def _catalog_value(value: Any, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value:
        return value
    raise ConfigError(f"{key}: expected a string, number or boolean, got {shown(value)}")


def parse_export_config(raw: Any) -> ExportConfig:
    """``export: {namespace: NAME, catalog_name: NAME, catalog: {type: sql, uri: ..., warehouse: ...},
    topics: {TOPIC: {key, value, table}}, schema_registry: {url, auth}}``."""
    section = require_mapping(raw if raw is not None else {}, "export")
    check_keys(section, {"namespace", "catalog", "catalog_name", "topics", "schema_registry"}, "export")
    namespace = as_str(section.get("namespace", DEFAULT_NAMESPACE), "export.namespace")
    if "." in namespace or namespace.strip() != namespace:
        raise ConfigError(f"export.namespace: {shown(namespace)} must be one name without dots or spaces")
    catalog_name = as_str(section.get("catalog_name", DEFAULT_CATALOG_NAME), "export.catalog_name")
    if not catalog_name or "." in catalog_name or catalog_name.strip() != catalog_name or len(catalog_name) > 255:
        raise ConfigError(
            f"export.catalog_name: {shown(catalog_name)} must be one name of at most 255 characters, "
            "without dots or spaces"
        )
    catalog_raw = require_mapping(section.get("catalog") or {}, "export.catalog")
    catalog = {str(k): _catalog_value(v, f"export.catalog.{k}") for k, v in catalog_raw.items()}
    catalog.setdefault("type", DEFAULT_CATALOG_TYPE)
    if catalog["type"] == "sql" and "uri" not in catalog:
        raise ConfigError("export.catalog.uri: a sql catalog needs the SQLAlchemy URL of its database")
    warehouse = catalog.get("warehouse")
    if warehouse is not None and not warehouse.startswith(("s3://", "s3a://", "file://", "/")):
        raise ConfigError(
            f"export.catalog.warehouse: {shown(warehouse)} is not an s3://, s3a://, file:// URL or absolute path"
        )
    if catalog["type"] == "sql" and warehouse is None:
        raise ConfigError(
            "export.catalog.warehouse: a sql catalog needs a warehouse (s3://BUCKET/PATH or file:///PATH)"
        )
    path_style = catalog.get(S3_PATH_STYLE_ACCESS)
    if path_style is not None and path_style.lower() not in ("true", "false"):
        raise ConfigError(f"export.catalog.{S3_PATH_STYLE_ACCESS}: expected true or false, got {shown(path_style)}")
    typed = parse_typed_export(section)
    return ExportConfig(
        namespace=namespace,
        catalog=catalog,
        catalog_name=catalog_name,
        topics=typed.topics,
        schema_registry=typed.schema_registry,
    )
