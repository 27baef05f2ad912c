"""The ``export:`` section: pyiceberg catalog properties passed as given (``sql`` by default), an
S3 warehouse's endpoint, region, path style and credentials taken from ``remote`` and the AWS
chain when not given, and bad input a ConfigError naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.config.support import base_doc
from tiering_core.config import ExportConfig, parse_config
from tiering_core.errors import ConfigError, ExportError
from tiering_core.export import TableName, catalog_properties, table_name


def parsed(tmp_path: Path, export: Any) -> Any:
    return parse_config({**base_doc(tmp_path), "export": export}, base_dir=tmp_path)


def test_no_section_means_no_export(tmp_path: Path) -> None:
    assert parse_config(base_doc(tmp_path), base_dir=tmp_path).export is None


def test_defaults_and_properties_as_given(tmp_path: Path) -> None:
    config = parsed(
        tmp_path, {"catalog": {"uri": "sqlite:////var/lib/iceberg.db", "warehouse": "file:///wh", "x.y": 3}}
    )
    assert config.export == ExportConfig(
        namespace="kafka",
        catalog={"type": "sql", "uri": "sqlite:////var/lib/iceberg.db", "warehouse": "file:///wh", "x.y": "3"},
    )
    props = catalog_properties(config)
    assert props["warehouse"] == "file:///wh" and "s3.endpoint" not in props
    assert "sqlite" not in repr(config.export)  # the URI may hold a password


def test_an_s3_warehouse_takes_what_it_lacks_from_remote_and_the_aws_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-example")
    doc = base_doc(tmp_path)
    doc["remote"]["region"] = "eu-west-1"
    doc["export"] = {"catalog": {"uri": "sqlite:///x.db", "warehouse": "s3://lake/wh"}}
    props = catalog_properties(parse_config(doc, base_dir=tmp_path))
    assert props["s3.endpoint"] == "http://127.0.0.1:9" and props["s3.region"] == "eu-west-1"
    assert props["s3.path-style-access"] == "true"
    assert props["s3.access-key-id"] == "AKIDEXAMPLE" and props["s3.secret-access-key"] == "secret-example"
    doc["export"]["catalog"].update(
        {"s3.endpoint": "https://s3.example", "s3.access-key-id": "mine", "s3.secret-access-key": "k"}
    )
    given = catalog_properties(parse_config(doc, base_dir=tmp_path))
    assert given["s3.endpoint"] == "https://s3.example" and given["s3.access-key-id"] == "mine"


@pytest.mark.parametrize(
    ("export", "key"),
    [
        ([], "export"),
        ({"catalog": {}, "tables": 1}, "export.tables"),
        ({"namespace": "a.b", "catalog": {"uri": "sqlite:///x", "warehouse": "/w"}}, "export.namespace"),
        ({"namespace": "", "catalog": {"uri": "sqlite:///x", "warehouse": "/w"}}, "export.namespace"),
        ({"catalog": {"warehouse": "/w"}}, "export.catalog.uri"),
        ({"catalog": {"uri": "sqlite:///x"}}, "export.catalog.warehouse"),
        ({"catalog": {"uri": "sqlite:///x", "warehouse": "relative/wh"}}, "export.catalog.warehouse"),
        (
            {"catalog": {"uri": "sqlite:///x", "warehouse": "/w", "s3.path-style-access": "maybe"}},
            "export.catalog.s3.path-style-access",
        ),
        ({"catalog": {"uri": ["a"], "warehouse": "/w"}}, "export.catalog.uri"),
        ({"catalog": "sql"}, "export.catalog"),
        ({"catalog_name": "", "catalog": {"uri": "sqlite:///x", "warehouse": "/w"}}, "export.catalog_name"),
        ({"catalog_name": "a.b", "catalog": {"uri": "sqlite:///x", "warehouse": "/w"}}, "export.catalog_name"),
        ({"catalog_name": " lake", "catalog": {"uri": "sqlite:///x", "warehouse": "/w"}}, "export.catalog_name"),
        ({"catalog_name": 7, "catalog": {"uri": "sqlite:///x", "warehouse": "/w"}}, "export.catalog_name"),
        ({"catalog_name": "x" * 256, "catalog": {"uri": "sqlite:///x", "warehouse": "/w"}}, "export.catalog_name"),
    ],
)
def test_bad_input_names_the_key(tmp_path: Path, export: Any, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: "):
        parsed(tmp_path, export)


def test_the_catalog_name_is_a_setting_tiering_by_default(tmp_path: Path) -> None:
    catalog = {"uri": "sqlite:///x.db", "warehouse": "file:///wh"}
    assert parsed(tmp_path, {"catalog": catalog}).export.catalog_name == "tiering"
    config = parsed(tmp_path, {"catalog": catalog, "catalog_name": "lake"})
    assert config.export.catalog_name == "lake" and "lake" in repr(config.export)


def test_table_names_keep_the_whole_topic_name() -> None:
    config = ExportConfig(namespace="kafka", catalog={"type": "sql"})
    assert table_name(config, "orders.eu.v2").identifier == ("kafka", "orders.eu.v2")
    assert table_name(config, "orders.eu", "lake.orders_eu") == TableName("lake", "orders_eu")
    with pytest.raises(ExportError, match="--table"):
        table_name(config, "orders", "nodot")
