"""The erase operator's request: keys as a list or a file under the key directory, rendered
Params parsed back from JSON; bad ones refused (``ErasureRefusedError``) naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiering_airflow.operators.erase import TieringEraseOperator, from_json
from tiering_core.runs.errors import ErasureRefusedError


def operator(**kwargs: object) -> TieringEraseOperator:
    return TieringEraseOperator(task_id="erase", topic="orders", confirm="orders", **kwargs)  # type: ignore[arg-type]


def test_rendered_params_are_read_back_from_json() -> None:
    assert from_json('["a", "b"]', "keys") == ["a", "b"]
    assert from_json("null", "key_file") is None
    assert from_json(["a"], "keys") == ["a"]  # not rendered: as given
    with pytest.raises(ValueError, match="keys: expected JSON"):
        from_json("[unclosed", "keys")


def test_keys_come_from_the_list_or_the_file_in_their_encoding(tmp_path: Path) -> None:
    (tmp_path / "request.txt").write_text("757365722d31\n757365722d32\n")
    assert operator(keys='["user-1"]').request_keys() == {b"user-1"}
    from_file = operator(key_file='"request.txt"', key_encoding="hex", key_dir=str(tmp_path))
    assert from_file.request_keys() == {b"user-1", b"user-2"}


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({}, "not both and not neither"),
        ({"keys": '["k"]', "key_file": '"request.txt"'}, "not both and not neither"),
        ({"keys": "[]"}, "a list of at least one key"),
        ({"keys": '"k"'}, "a list of at least one key"),
        ({"keys": '["zz"]', "key_encoding": "hex"}, "not a key in hex"),
        ({"key_file": '"request.txt"'}, "dags.erase.key_dir is not set"),
        ({"key_file": '"absent.txt"', "key_dir": "KEY_DIR"}, "key_file absent.txt: cannot be read"),
    ],
)
def test_bad_requests_are_refused_naming_the_problem(tmp_path: Path, kwargs: dict, reason: str) -> None:
    kwargs = {k: str(tmp_path) if v == "KEY_DIR" else v for k, v in kwargs.items()}
    with pytest.raises(ErasureRefusedError) as refused:
        operator(**kwargs).request_keys()
    assert reason in str(refused.value)
