"""The Tiering page and its JSON answer with the live state of the store on every request."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from plugins.tiering_ui.app import COLUMNS, create_app
from tests.engine_support import TieringEnv, write_segments
from tiering_core.copy import run_copy
from tiering_core.errors import TieringGapError
from tiering_core.status import STATUS_FIELDS


@pytest.fixture()
def client(tiering: TieringEnv) -> TestClient:
    return TestClient(create_app(str(tiering.config_path)))


def test_json_follows_the_live_state(tiering: TieringEnv, client: TestClient) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 3)
    w.append_records(2)
    w.set_high_watermark()
    (before,) = client.get("/api/partitions").json()
    assert set(STATUS_FIELDS) | {"local_retention_risk"} <= set(before)
    assert (before["topic"], before["partition"], before["last_stable_offset"]) == ("orders", 0, 17)
    assert (before["highest_copied_offset"], before["copy_lag_segments"], before["remote_bytes"]) == (-1, 3, 0)
    with tiering.context() as ctx:
        run_copy(ctx, w.tp)
    (after,) = client.get("/api/partitions").json()
    assert (after["highest_copied_offset"], after["copy_lag_segments"], after["remote_segments"]) == (14, 0, 3)
    assert after["remote_bytes"] > 0 and after["gaps"] == [] and after["delete_state"] is None


def test_topic_filter(tiering: TieringEnv, client: TestClient) -> None:
    for topic in ("orders", "payments"):
        tiering.writer(topic, 0).append_records(1)
    assert [r["topic"] for r in client.get("/api/partitions").json()] == ["orders", "payments"]
    assert [r["topic"] for r in client.get("/api/partitions", params={"topic": "payments"}).json()] == ["payments"]


def test_page_lists_every_partition_with_its_tier_state_and_flags_gaps(tiering: TieringEnv, client) -> None:
    healthy = tiering.writer("orders", 0)
    write_segments(healthy, 1)
    broken = tiering.writer("orders", 1)
    write_segments(broken, 2)
    for w in (healthy, broken):
        w.set_high_watermark()
        with tiering.context() as ctx:
            run_copy(ctx, w.tp)
    write_segments(broken, 2)
    broken.set_high_watermark()
    broken.delete_oldest_segments(3)  # [10..14] was never copied: a tiering gap
    with tiering.context() as ctx, pytest.raises(TieringGapError):
        run_copy(ctx, broken.tp)
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    for _, title in COLUMNS:
        assert f"<th>{title}</th>" in text
    assert "<td>orders-0</td>" in text and "<td>orders-1</td>" in text
    assert '<td class="bad">10..14</td>' in text  # the gap, flagged
    assert text.count('<tr class="alert">') == 1 and "1 with tiering gaps" in text
    assert "href='api/partitions'" in text  # relative: works under any prefix


def test_a_broken_config_is_reported_not_crashed(tiering: TieringEnv) -> None:
    client = TestClient(create_app(str(tiering.root / "absent.yaml")))
    answer = client.get("/api/partitions")
    assert answer.status_code == 503 and "cannot read config file" in answer.json()["detail"]
    page = client.get("/")
    assert page.status_code == 503 and "Tier state unavailable: cannot read config file" in page.text


def test_without_an_explicit_path_the_config_is_resolved_per_request(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = TestClient(create_app())
    tiering.writer("orders", 0).append_records(1)
    assert [r["topic"] for r in client.get("/api/partitions").json()] == ["orders"]
    monkeypatch.delenv("TIERING_CONFIG")
    answer = client.get("/api/partitions")
    assert answer.status_code == 503 and "TIERING_CONFIG" in answer.json()["detail"]
