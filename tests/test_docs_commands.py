"""docs/commands.md documents every command of the ``tiering`` parser, the subcommands of
``db`` included, and its table has a row for each command and for no other."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from tiering_core.cli.main import build_parser

PAGE = Path(__file__).resolve().parents[1] / "docs/commands.md"


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    """Every command and subcommand of ``parser``, as typed (``db upgrade``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield " ".join((*prefix, name))
                yield from commands(sub, (*prefix, name))


def documented(command: str, text: str) -> bool:
    """The page writes the command in a code span, alone or with its arguments."""
    return re.search(r"`" + re.escape(command) + r"[ `]", text) is not None


def test_every_command_of_the_parser_is_documented() -> None:
    text = PAGE.read_text()
    found = list(commands(build_parser()))
    assert {"status", "copy", "replay", "db", "db upgrade", "db backup"} <= set(found)
    assert [command for command in found if not documented(command, text)] == []


def test_the_command_table_has_a_row_for_each_command_and_no_other() -> None:
    """Each row starts with the command it is about; ``db``'s actions are rows of ``db``."""
    top_level = {command for command in commands(build_parser()) if " " not in command}
    named = set(re.findall(r"^\| `([a-z-]+)", PAGE.read_text(), flags=re.MULTILINE))
    assert named == top_level


def test_documented_finds_a_command_only_as_a_command() -> None:
    assert documented("db current", "| `db upgrade [REV]` / `db current` |")
    assert documented("copy", "`copy [--dry-run]`")
    assert not documented("copy", "`copy_lag_bytes`") and not documented("erase", "erased records")
