"""docs/troubleshooting.md: each entry quotes at least one fragment of a real message, and every
fragment it quotes occurs in a string of the code (an f-string's text between its fields, adjacent
literals joined as Python joins them), so an entry cannot outlive the message it explains."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/troubleshooting.md"
CODE_DIRS = ("tiering_core", "plugins", "spark_apps", "dags")
MESSAGE = re.compile(r"^\*\*Message:\*\* `([^`]+)`$", flags=re.MULTILINE)
#: Where an f-string's field was: a quoted fragment never spans one.
FIELD = "\x00"


def strings(source: str) -> list[str]:
    """The text of every string literal of ``source``, an f-string's fields as ``FIELD``."""
    found, parts = [], set()
    for node in ast.walk(ast.parse(source)):  # breadth first: an f-string before its parts
        if isinstance(node, ast.JoinedStr):
            parts.update(id(part) for part in node.values)
            found.append("".join(part.value if isinstance(part, ast.Constant) else FIELD for part in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            found.append(node.value)
    return found


@cache
def code_strings() -> tuple[str, ...]:
    files = sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))
    return tuple(text for path in files for text in strings(path.read_text()))


def entries() -> dict[str, list[str]]:
    """Each entry's heading and the fragments it quotes."""
    sections = re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)[1:]
    return {section.splitlines()[0]: MESSAGE.findall(section) for section in sections}


def test_the_page_has_fifteen_entries_each_quoting_a_message() -> None:
    found = entries()
    assert len(found) == 15
    assert [title for title, fragments in found.items() if not fragments] == []


def test_every_quoted_fragment_occurs_in_the_code() -> None:
    fragments = [fragment for quoted in entries().values() for fragment in quoted]
    missing = [f for f in fragments if not any(f in text for text in code_strings())]
    assert missing == []


def test_strings_joins_adjacent_literals_and_keeps_fields_apart() -> None:
    source = 'x = f"{a}: lease held by {b} (token " "{c})"\ny = ("one, " "two")\n'
    assert strings(source) == [f"{FIELD}: lease held by {FIELD} (token {{c}})", "one, two"]
    assert not any("held by other" in text for text in strings(source))
