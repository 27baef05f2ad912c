"""``tiering db``: a store behind the code is refused by every other command, in one line naming
its revision, the head and ``tiering db upgrade``, which then works on it (SQLite and PostgreSQL);
``tiering db backup`` prints what it wrote and refuses in one line, PostgreSQL with no password."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.engine_support import TieringEnv, write_segments
from tiering_core.cli import main
from tiering_core.metadata.migrations import current_revision, head_revision

OLDER = "0009_retention_percent"


def write_config(tmp_path: Path, metadata: dict[str, object]) -> Path:
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir(exist_ok=True)
    config = tmp_path / "tiering.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log_dirs": [str(log_dir)],
                "metadata": metadata,
                "remote": {"backend": "filesystem", "root": str(tmp_path / "remote")},
            }
        )
    )
    return config


def run(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--config", str(config), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_an_older_store_is_refused_by_every_command_until_db_upgrade(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copied partition's store left at an older revision: status, segments, copy all refused,
    nothing changed; ``db upgrade`` then works, and the segments are the ones copied before."""
    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    config, url = tiering_env.config_path, tiering_env.metadata_url
    assert run(capsys, config, "copy")[0] == 0  # a new database: created at head, then written
    listing = ("--json", "segments", "--topic", "orders", "--partition", "0")
    code, copied, err = run(capsys, config, *listing)
    assert code == 0 and len(json.loads(copied)) == 3, err
    assert run(capsys, config, "db", "downgrade", OLDER)[:2] == (0, f"metadata schema at revision {OLDER}\n")
    for command in (("status",), ("status", "--cluster"), listing, ("copy",)):
        code, out, err = run(capsys, config, *command)
        assert (code, out) == (1, ""), command
        assert err.startswith("tiering: metadata store ") and err.count("\n") == 1, err
        assert f"is at schema revision {OLDER}, behind this version of the platform (head {head_revision()})" in err
        assert "run `tiering db upgrade`" in err
    assert current_revision(url) == OLDER  # refused, not migrated
    assert run(capsys, config, "db", "current")[:2] == (0, f"metadata schema at revision {OLDER}\n")
    code, out, err = run(capsys, config, "--json", "db", "upgrade")
    assert (code, json.loads(out)) == (0, {"revision": head_revision()}), err
    assert run(capsys, config, *listing)[:2] == (0, copied)


def test_db_backup_prints_what_it_wrote_and_refuses_in_one_line(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, {"url": sqlite_url})
    target = tmp_path / "backups" / "tiering.db"
    code, out, err = run(capsys, config, "db", "backup", str(target))
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert "no metadata store at" in err and "nothing to back up" in err  # and none was made
    assert not Path(sqlite_url.removeprefix("sqlite:///")).exists()
    assert run(capsys, config, "status")[0] == 0
    code, out, err = run(capsys, config, "db", "backup", str(target))
    assert (code, out) == (1, "") and f"directory {target.parent} does not exist" in err and err.count("\n") == 1
    target.parent.mkdir()
    code, out, err = run(capsys, config, "db", "backup", str(target))
    size = target.stat().st_size
    assert (code, err) == (0, "")
    wrote = f"({size / 1024:.1f} KiB, {size} bytes, schema revision {head_revision()})"
    assert out == f"backed up the metadata store to {target} {wrote}\n"
    assert target.stat().st_mode & 0o777 == 0o600  # the owner's only
    with sqlite3.connect(target) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (head_revision(),)
    before = target.read_bytes()
    code, out, err = run(capsys, config, "db", "backup", str(target))
    assert (code, out) == (1, "") and err == f"tiering: backup file {target} exists: pass --force to replace it\n"
    assert target.read_bytes() == before
    code, out, err = run(capsys, config, "--json", "db", "backup", str(target), "--force")
    assert code == 0, err
    assert json.loads(out) == {"path": str(target), "size_bytes": target.stat().st_size, "revision": head_revision()}
    assert sorted(os.listdir(target.parent)) == ["tiering.db"]


def test_db_backup_of_a_postgresql_store_points_at_pg_dump_and_shows_no_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "s3cret-pw")
    config = write_config(
        tmp_path,
        {"url": "postgresql+psycopg://tiering@db.invalid:5432/tiering", "password_env": "TIERING_METADATA_PASSWORD"},
    )
    code, out, err = run(capsys, config, "db", "backup", str(tmp_path / "tiering.dump"))
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert "pg_dump -Fc" in err and 'docs/upgrading.md "Backup and recovery"' in err and "tiering:***@db.invalid" in err
    assert "s3cret-pw" not in err
    assert not (tmp_path / "tiering.dump").exists()
