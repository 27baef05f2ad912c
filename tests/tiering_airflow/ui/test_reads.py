"""The page's and the exposition's reads: one open context per config file, kept between requests,
opened again when the file changes or after a read failed."""

from __future__ import annotations

import pytest

from tests.engine_support import TieringEnv
from tiering_airflow.ui.reads import OpenContexts, StoreUnavailable
from tiering_core.errors import TieringError


def test_the_context_is_kept_between_reads_and_reopened_when_the_config_changes(tiering: TieringEnv) -> None:
    contexts = OpenContexts()
    path = str(tiering.config_path)
    first = contexts.read(path, lambda ctx: ctx)
    assert contexts.read(path, lambda ctx: ctx) is first
    tiering.config_path.write_text(tiering.config_path.read_text() + "\n# edited\n")
    second = contexts.read(path, lambda ctx: ctx)
    assert second is not first
    assert contexts.read(path, lambda ctx: ctx.metadata.database_now_ms()) > 0


def test_a_failed_read_drops_the_context_and_says_why(tiering: TieringEnv) -> None:
    contexts = OpenContexts()
    path = str(tiering.config_path)
    first = contexts.read(path, lambda ctx: ctx)

    def broken(ctx: object) -> None:
        raise TieringError("the store went away")

    with pytest.raises(StoreUnavailable, match="the store went away"):
        contexts.read(path, broken)
    assert contexts.read(path, lambda ctx: ctx) is not first


def test_a_missing_config_is_unavailable_not_a_crash(tiering: TieringEnv) -> None:
    with pytest.raises(StoreUnavailable, match=r"absent\.yaml"):
        OpenContexts().read(str(tiering.root / "absent.yaml"), lambda ctx: ctx)
