"""The YAML underneath every section (``tiering_core/config/parsing.py``): duplicate and merge
keys, integers given as strings, bounded alias expansion, errors that never show the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import load_config, parse_config
from tiering_core.errors import ConfigError


def test_a_key_given_twice_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "tiering.yaml"
    path.write_text(
        "log_dirs: [data]\nmetadata: {url: 'sqlite:///meta.db'}\nremote: {backend: filesystem, root: tier}\n"
        "topics:\n  orders: {retention.ms: 1000}\n  orders: {retention.ms: 2000}\n"
    )
    with pytest.raises(ConfigError, match=r"duplicate key 'orders'"):
        load_config(path)


def test_merge_keys_may_be_overridden_and_an_unhashable_key_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "tiering.yaml"
    head = "log_dirs: [data]\nmetadata: {url: 'sqlite:///meta.db'}\nremote: {backend: filesystem, root: tier}\n"
    path.write_text(
        head + "topics:\n  payments: &short {retention.ms: 1000, retention.bytes: 10}\n"
        "  orders: {<<: *short, retention.ms: 2000}\n"
    )
    orders = load_config(path).topic_config("orders")
    assert (orders.retention_ms, orders.retention_bytes) == (2000, 10)
    path.write_text(head + "topics:\n  ? [orders, payments]\n  : {retention.ms: 1000}\n")
    with pytest.raises(ConfigError, match="unhashable key"):
        load_config(path)


def test_string_integers_are_accepted_only_when_they_are_integers(tmp_path: Path) -> None:
    doc = base_doc(tmp_path)
    doc["topics"]["orders"]["retention.ms"] = " -1 "
    assert parse_config(doc).topic_config("orders").retention_ms == -1


def _alias_bomb(levels: int = 9) -> str:
    """Nine lists of nine aliases of the list before: a few hundred bytes that stand for 9**9
    strings once anything walks them."""
    lines = ["    - &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"    - &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _merge_bomb(levels: int = 9) -> str:
    lines = ["    m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    for i in range(1, levels):
        lines.append(f"    m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}")
    return "\n".join(lines) + "\n"


HEAD = "log_dirs: [data]\nmetadata: {url: 'sqlite:///meta.db'}\n"


BOMBS = {
    "alias in a value": HEAD + "remote:\n  backend: filesystem\n  root: tier\n  region:\n" + _alias_bomb(),
    "nested merge keys": HEAD + "remote: {backend: filesystem, root: tier}\ntopics:\n  orders:\n" + _merge_bomb(),
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_yaml_alias_expansion_is_refused_in_bounded_memory(tmp_path: Path, bomb: str) -> None:
    """A config of a few hundred bytes whose aliases stand for billions of values is an error,
    found without expanding it: measured in a subprocess (peak RSS), with its address space
    capped so that a failure cannot take the machine's memory."""
    from tests.memory import run_measured

    path = tmp_path / "tiering.yaml"
    path.write_text(BOMBS[bomb])
    assert path.stat().st_size < 1000
    probe = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from tiering_core.config import load_config\n"
        "from tiering_core.errors import ConfigError\n"
        "try:\n"
        "    load_config(sys.argv[1])\n"
        "except ConfigError as exc:\n"
        "    print(len(str(exc)))\n"
    )
    printed, peak_mib = run_measured(probe, str(path))
    message_length, peak_kib = int(printed), peak_mib * 1024
    assert message_length < 1000
    assert peak_kib < 256 * 1024


def test_a_yaml_error_names_line_and_column_but_never_shows_the_line(tmp_path: Path) -> None:
    """PyYAML's message quotes the offending line, which may be the DB URL with its password."""
    path = tmp_path / "tiering.yaml"
    path.write_text(
        "log_dirs: [data]\nmetadata: {url: 'postgresql+psycopg://tiering:s3cret-pw@db/meta', lease_ms: [1}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "s3cret-pw" not in message and "postgresql" not in message
    assert "not valid YAML: line 2, column " in message
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no traceback shows it either


def test_a_mapping_without_merge_keys_may_be_large(tmp_path: Path) -> None:
    path = tmp_path / "tiering.yaml"
    topics = "".join(f"  t{i}: {{}}\n" for i in range(10_001))
    path.write_text(HEAD + "remote: {backend: filesystem, root: tier}\ntopics:\n" + topics)
    assert len(load_config(path).topics) == 10_002
