"""The page's and the exposition's reads: one open context per config file, kept between requests,
opened again when the file changes or after a read failed (or the store was refused: an older
schema is named, with the upgrade to run, and never migrated by the page)."""

from __future__ import annotations

import pytest

from tests.engine_support import TieringEnv
from tiering_airflow.ui.reads import OpenContexts, StoreUnavailable
from tiering_core.errors import TieringError
from tiering_core.metadata.migrations import current_revision, downgrade, head_revision, upgrade


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


def test_a_store_behind_the_code_is_unavailable_naming_the_upgrade_until_it_is_upgraded(tiering: TieringEnv) -> None:
    upgrade(tiering.metadata_url)  # a new store at head
    downgrade(tiering.metadata_url, "0009_retention_percent")
    contexts = OpenContexts()
    path = str(tiering.config_path)
    behind = rf"schema revision 0009_retention_percent, behind .* \(head {head_revision()}\).* run `tiering db upgrade`"
    for _ in range(2):  # every request says so; none migrates
        with pytest.raises(StoreUnavailable, match=behind):
            contexts.read(path, lambda ctx: ctx)
    assert current_revision(tiering.metadata_url) == "0009_retention_percent"
    upgrade(tiering.metadata_url)
    assert contexts.read(path, lambda ctx: ctx.metadata.database_now_ms()) > 0
