"""``export.topics`` (a topic's key and value formats, its table's name) and
``export.schema_registry`` (its url and basic auth, the password only by where it is): bad input a
ConfigError naming the key, the password never in a message or repr."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.config.support import base_doc
from tiering_core.config import parse_config
from tiering_core.config.export_topics import SchemaRegistryConfig, TopicExport
from tiering_core.errors import ConfigError
from tiering_core.export import table_name

CATALOG = {"uri": "sqlite:///x.db", "warehouse": "file:///wh"}
REGISTRY = {"url": "http://registry.example:8081"}


def parsed(tmp_path: Path, **export: Any) -> Any:
    return parse_config({**base_doc(tmp_path), "export": {"catalog": CATALOG, **export}}, base_dir=tmp_path).export


def test_bytes_by_default_a_registry_format_by_topic_and_a_table_alias(tmp_path: Path) -> None:
    export = parsed(
        tmp_path,
        topics={
            "orders": {"value": "avro", "table": "orders_typed"},
            "clicks": {"key": "bytes", "value": "bytes"},
            "carts": {"value": "json_schema"},
            "refunds": {"value": "protobuf"},
            "users": {"key": "avro", "subject_strategy": "topic_record"},
            "lines": {
                "key": "protobuf",
                "value": "protobuf",
                "value_message": ".shop.Order.Line",
                "key_message": "k.Id",
            },
        },
        schema_registry=REGISTRY,
    )
    assert export.topic("orders") == TopicExport(value="avro", table="orders_typed")
    assert export.topic("carts") == TopicExport(value="json_schema") and export.topic("carts").typed
    assert export.topic("refunds") == TopicExport(value="protobuf") and export.topic("refunds").typed
    assert export.topic("users") == TopicExport(key="avro", subject_strategy="topic_record")
    assert export.topic("users").typed and export.topic("orders").subject_strategy is None  # unchecked
    lines = export.topic("lines")
    assert (lines.value_message, lines.key_message, lines.messages) == (
        "shop.Order.Line",
        "k.Id",
        ("shop.Order.Line", "k.Id"),
    )
    assert export.topic("refunds").messages == (None, None)  # the file's first message
    assert export.topic("clicks") == TopicExport() and not export.topic("clicks").typed
    assert export.topic("other") == TopicExport() and not export.topic("other").typed
    assert export.topic("orders").typed
    assert table_name(export, "orders").identifier == ("kafka", "orders_typed")
    assert table_name(export, "clicks").identifier == ("kafka", "clicks")
    assert export.schema_registry == SchemaRegistryConfig("http://registry.example:8081")
    assert parsed(tmp_path).topics == {} and parsed(tmp_path).schema_registry is None


@pytest.mark.parametrize(
    ("export", "key", "says"),
    [
        ({"topics": {"orders": {"key": "thrift"}}}, "export.topics.orders.key", "expected one of"),
        (
            {"topics": {"orders": {"subject_strategy": "record_name"}}},
            "export.topics.orders.subject_strategy",
            "expected one of topic, record, topic_record",
        ),
        ({"topics": {"orders": {"key": "avro"}}}, "export.schema_registry", "export.topics.orders"),
        ({"topics": {"orders": {"value": "thrift"}}}, "export.topics.orders.value", "expected one of"),
        ({"topics": {"orders": {"value": "avro", "schema": 1}}}, "export.topics.orders.schema", "unknown key"),
        ({"topics": {"orders": {"table": "a.b"}}}, "export.topics.orders.table", "without dots"),
        (
            {"topics": {"orders": {"value": "avro", "value_message": "shop.Payment"}}},
            "export.topics.orders.value_message",
            "only a protobuf value names a message [(]value is avro[)]",
        ),
        (
            {"topics": {"orders": {"value": "protobuf", "key_message": "shop.Id"}}},
            "export.topics.orders.key_message",
            "only a protobuf key names a message [(]key is bytes[)]",
        ),
        (
            {"topics": {"orders": {"value": "protobuf", "value_message": "shop..Payment"}}},
            "export.topics.orders.value_message",
            "is not a message's full name",
        ),
        (
            {"topics": {"orders": {"value": "protobuf", "value_message": "shop Payment"}}},
            "export.topics.orders.value_message",
            "is not a message's full name",
        ),
        (
            {"topics": {"orders": {"value": "protobuf", "value_message": 7}}},
            "export.topics.orders.value_message",
            "expected a non-empty string",
        ),
        ({"topics": {"orders": {"table": 3}}}, "export.topics.orders.table", "expected a non-empty string"),
        ({"topics": ["orders"]}, "export.topics", "expected a mapping"),
        ({"topics": {"orders": {"value": "avro"}}}, "export.schema_registry", "export.topics.orders"),
        ({"topics": {"carts": {"value": "json_schema"}}}, "export.schema_registry", "export.topics.carts"),
        ({"schema_registry": {"url": "ftp://r:1"}}, "export.schema_registry.url", "http"),
        ({"schema_registry": {"url": "http://u:pw@r:1"}}, "export.schema_registry.url", "credentials"),
        ({"schema_registry": {"url": "http://r", "token": "x"}}, "export.schema_registry.token", "unknown key"),
        ({"schema_registry": {**REGISTRY, "auth": {"password_env": "P"}}}, "export.schema_registry.auth.username", ""),
        ({"schema_registry": {**REGISTRY, "auth": {"username": "u"}}}, "export.schema_registry.auth", "one of"),
        (
            {"schema_registry": {**REGISTRY, "auth": {"username": "u", "password": "hunter2"}}},
            "export.schema_registry.auth.password",
            "unknown key",
        ),
        (
            {"schema_registry": {**REGISTRY, "auth": {"username": "u", "password_file": "rel/pw"}}},
            "export.schema_registry.auth.password_file",
            "absolute",
        ),
    ],
)
def test_bad_input_names_the_key(tmp_path: Path, export: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: .*{says}") as caught:
        parsed(tmp_path, **export)
    assert "hunter2" not in str(caught.value) and "pw@" not in str(caught.value)


def test_the_password_is_read_when_asked_from_where_the_file_says(tmp_path: Path) -> None:
    by_env = parsed(
        tmp_path, schema_registry={**REGISTRY, "auth": {"username": "tiering", "password_env": "REGISTRY_PW"}}
    ).schema_registry
    assert by_env.password({"REGISTRY_PW": "s3cret-by-env"}) == "s3cret-by-env"
    with pytest.raises(ConfigError, match=r"password_env \(REGISTRY_PW\): the environment variable is not set"):
        by_env.password({})
    secret = tmp_path / "registry-password"
    secret.write_text("s3cret-by-file\n")
    by_file = parsed(
        tmp_path, schema_registry={**REGISTRY, "auth": {"username": "tiering", "password_file": str(secret)}}
    ).schema_registry
    assert by_file.password() == "s3cret-by-file"
    assert "s3cret" not in repr(by_file) + repr(by_env)
    secret.unlink()
    with pytest.raises(ConfigError, match=r"password_file .*cannot read the password") as caught:
        by_file.password()
    assert "s3cret" not in str(caught.value)
