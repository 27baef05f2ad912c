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


def test_the_route_is_the_local_task_unless_spark_is_asked() -> None:
    from tiering_airflow.operators.erase import LOCAL_TASK_ID, SPARK_TASK_ID, erasure_route

    request = {"topic": "orders", "confirm": "orders", "key_file": "r.txt", "keys": None}
    assert erasure_route(request, "/keys") == LOCAL_TASK_ID
    assert erasure_route({**request, "spark": False}, None) == LOCAL_TASK_ID  # the local task checks the rest
    assert erasure_route({**request, "spark": True}, "/keys") == SPARK_TASK_ID


@pytest.mark.parametrize(
    ("change", "key_dir", "reason"),
    [
        ({"confirm": "order"}, "/keys", "confirm must repeat the topic name 'orders'"),
        ({"keys": ["k"], "key_file": None}, "/keys", "on Spark, give the keys as key_file"),
        ({"keys": ["k"]}, "/keys", "on Spark, give the keys as key_file"),
        ({"key_file": None}, "/keys", "on Spark, give the keys as key_file"),
        ({}, None, "dags.erase.key_dir, which the config does not set"),
    ],
)
def test_on_spark_a_request_the_app_cannot_take_safely_is_refused(
    change: dict[str, object], key_dir: str | None, reason: str
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from tiering_airflow.operators.erase import erasure_route

    request = {"topic": "orders", "confirm": "orders", "key_file": "r.txt", "keys": None, "spark": True}
    with pytest.raises(AirflowFailException, match=reason):
        erasure_route({**request, **change}, key_dir)
