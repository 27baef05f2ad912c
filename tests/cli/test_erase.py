"""``tiering erase``'s options: refused in one line without --yes (or --dry-run), without a topic
or a key; --key and --key-file exclude each other."""

from __future__ import annotations

import pytest

from tiering_core.cli import main


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--topic", "orders", "--key", "user-1"], "refusing to erase records of orders without --yes"),
        (["--key", "user-1", "--yes"], "erase needs --topic"),
        (["--topic", "orders", "--yes"], "erase needs --key or --key-file"),
    ],
)
def test_an_incomplete_erasure_is_refused_in_one_line(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    config = tmp_path / "unused.yaml"  # refused before any config is read
    assert main(["--config", str(config), "erase", *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and reason in err
    assert "user-1" not in err


def test_key_and_key_file_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["erase", "--topic", "orders", "--key", "a", "--key-file", "keys.txt", "--yes"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
