"""The primitives every section of the config file is read with: typed values whose errors name
the key, and a YAML loader that refuses duplicate keys and keeps secrets out of its messages."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping
from typing import Any

import yaml

from tiering_core.errors import ConfigError


def require_mapping(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def check_keys(section: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in section:
        if key not in allowed:
            name = f"{where}.{key}" if where else str(key)
            raise ConfigError(f"{name}: unknown key (allowed: {', '.join(sorted(allowed))})")


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 2, 4, 4, 80, 80


def shown(value: Any) -> str:
    """A value for an error message, bounded: YAML aliases can nest one small list into billions
    of elements, which a plain ``repr`` would expand in full."""
    return _SHOWN.repr(value)


INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


def as_int(value: Any, key: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and INTEGER.fullmatch(value.strip()):
            value = int(value.strip())
        else:
            raise ConfigError(f"{key}: expected an integer, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}: {value} is below the minimum {minimum}")
    return int(value)


def as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{key}: expected true or false, got {shown(value)}")


def as_str(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: expected a non-empty string, got {shown(value)}")
    return value


def positive_number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{key}: expected a positive number, got {shown(value)}")
    return float(value)


def optional_str(section: Mapping[str, Any], name: str, key: str) -> str | None:
    value = section.get(name)
    return None if value is None else as_str(value, key)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, never PyYAML's snippet of the line: it may hold the DB URL's password, and
    the message reaches logs, the page and DAG import errors."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return type(exc).__name__
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + (exc.problem or exc.context or "syntax error")


#: Entries of one mapping after merge keys are expanded: a config has a few dozen; nested merges of
#: aliases multiply them (``<<: [*a, *a, ...]`` at every level).
MAX_MAPPING_ENTRIES = 10_000


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error naming it:
    silently keeping the last value would let a typo'd override go unnoticed. Merge keys
    (``<<: *defaults``) may be overridden, as in YAML itself, up to ``MAX_MAPPING_ENTRIES``."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        merges = any(key_node.tag == "tag:yaml.org,2002:merge" for key_node, _ in node.value)
        super().flatten_mapping(node)
        if merges and len(node.value) > MAX_MAPPING_ENTRIES:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"merge keys expand it to more than {MAX_MAPPING_ENTRIES} entries",
                node.start_mark,
            )

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the safe loader names it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {shown(key)}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
