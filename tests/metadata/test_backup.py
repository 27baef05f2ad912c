"""Backups of the metadata store, with the lines of docs/upgrading.md, "Backup and recovery", run as written:
``backup_store`` on SQLite while a copy commits, each backup restored over a store and opened, and
its refusals; the pg_dump / pg_restore recipe run for real against the test PostgreSQL server and
the restored database opened by the platform."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import unavailable
from tests.metadata.support import S, finish, refused_then_upgraded, segment, tip
from tests.services import PostgresServer, pg_bindir
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.metadata.backup import backup_store
from tiering_core.metadata.errors import BackupError
from tiering_core.metadata.migrations import current_revision, downgrade, head_revision
from tiering_core.metadata.store import RemoteLogMetadataStore

ROOT = Path(__file__).resolve().parents[2]
TIP = tip("BBBBBBBBBBBBBBBBBBBBBB", "orders", 0)
#: A partition whose segments are there before the writer starts (a store that takes a while to copy).
EARLIER = tip("BBBBBBBBBBBBBBBBBBBBBB", "orders", 1)
#: A segment id and the state a commit left it in, in commit order.
Event = tuple[uuid.UUID, S]


class CopyingWriter(threading.Thread):
    """Commits segment states in a loop as copy and retention runs do: each segment started, then
    finished with its lineage (one transaction), and every fourth iteration the oldest live one
    deleted; ``history`` is every commit in order, appended once it returned."""

    def __init__(self, url: str) -> None:
        super().__init__(name="copying-writer", daemon=True)
        self.url = url
        self.history: list[Event] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with RemoteLogMetadataStore(self.url) as store:
                lease = store.acquire_lease(TIP, "copy:writer", ttl_ms=600_000)
                live: list[uuid.UUID] = []
                i = 0
                while not self.stop.is_set():
                    meta = segment(TIP, 10 * i, 10 * i + 9)
                    store.add_segment(meta, lease)
                    self.history.append((meta.segment_id, S.COPY_SEGMENT_STARTED))
                    store.finish_copied_segment(meta.segment_id, lease, custom_metadata={}, lineage=[EpochEntry(0, 0)])
                    self.history.append((meta.segment_id, S.COPY_SEGMENT_FINISHED))
                    live.append(meta.segment_id)
                    if i % 4 == 3:
                        oldest = live.pop(0)
                        for state in (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED):
                            store.update_segment_state(oldest, state, lease)
                            self.history.append((oldest, state))
                    i += 1
        except BaseException as exc:
            self.error = exc

    def committed(self) -> int:
        return len(self.history)


def states_after(history: list[Event], commits: int) -> dict[uuid.UUID, S]:
    states: dict[uuid.UUID, S] = {}
    for segment_id, state in history[:commits]:
        states[segment_id] = state
    return states


def restore_sqlite(backup: Path, directory: Path) -> str:
    """The SQLite restore of docs/upgrading.md, its lines as written, over a store whose processes stopped (one of
    them killed: its -wal left behind): the store's files moved aside, the backup copied in."""
    directory.mkdir()
    old = directory / "metadata.db"
    with RemoteLogMetadataStore(f"sqlite:///{old}") as store:
        store.register_partition(tip("DDDDDDDDDDDDDDDDDDDDDD", "replaced", 0))
    Path(f"{old}-wal").write_bytes(b"left by a killed process")
    env = {"PATH": os.environ["PATH"], "BACKUP": str(backup)}
    run_recipe("\n".join(readme_commands("aside=", "for f in ", "cp ")), env, cwd=directory)
    aside = sorted(p.name.split(".before-restore-")[0] for p in directory.iterdir() if ".before-restore-" in p.name)
    assert aside == ["metadata.db", "metadata.db-wal"]  # kept
    assert not Path(f"{old}-wal").exists() and not Path(f"{old}-shm").exists()
    assert old.read_bytes() == backup.read_bytes()
    return f"sqlite:///{old}"


def wait_for_commits(writer: CopyingWriter, more_than: int) -> None:
    deadline = 600
    while writer.committed() <= more_than and writer.is_alive() and deadline:
        writer.stop.wait(0.05)
        deadline -= 1
    assert writer.error is None, writer.error
    assert writer.committed() > more_than, "the writer stopped committing"


def test_a_backup_taken_while_a_copy_commits_restores_to_a_consistent_store(sqlite_url: str, tmp_path: Path) -> None:
    """Each backup is one snapshot of the store at a commit boundary: restored, it opens at head,
    passes integrity_check, and holds exactly the segment states after some prefix of the writer's
    commits (never half of a transaction), each finished segment reachable by offset."""
    with RemoteLogMetadataStore(sqlite_url) as store:
        lease = store.acquire_lease(EARLIER, "copy:earlier")
        for i in range(400):
            finish(store, lease, segment(EARLIER, 10 * i, 10 * i + 9))
        earlier = store.list_segments(EARLIER, include_deleted=True)
    writer = CopyingWriter(sqlite_url)
    writer.start()
    backups: list[tuple[Path, int, int]] = []
    try:
        for n in range(6):
            seen = writer.committed()
            wait_for_commits(writer, seen + 20)
            target = tmp_path / f"backup-{n}.db"
            low = writer.committed()
            done = backup_store(sqlite_url, target)
            high = writer.committed()
            assert (done.path, done.revision) == (target, head_revision())
            assert done.size_bytes == target.stat().st_size > 0
            backups.append((target, low, high))
        wait_for_commits(writer, backups[-1][2] + 20)  # still committing after the last one
    finally:
        writer.stop.set()
        writer.join(timeout=60)
    assert writer.error is None, writer.error
    assert any(high > low for _, low, high in backups), "no commit landed while a backup ran"
    assert not list(tmp_path.glob(".backup-*")), "a temporary file was left behind"
    history = writer.history
    for n, (backup, low, high) in enumerate(backups):
        url = restore_sqlite(backup, tmp_path / f"restored-{n}")
        with sqlite3.connect(make_url(url).database) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert current_revision(url) == head_revision()
        with RemoteLogMetadataStore(url) as restored:
            assert restored.list_segments(EARLIER, include_deleted=True) == earlier
            segments = restored.list_segments(TIP, include_deleted=True)
            assert {m.state for m in segments} <= set(S)
            states = {m.segment_id: m.state for m in segments}
            # the commits that landed before the backup returned, and none after: a prefix of them
            prefixes = [c for c in range(low - 1, high + 2) if states_after(history, c) == states]
            assert prefixes, f"backup {n} holds no prefix of the writer's commits between {low} and {high}"
            for meta in segments:
                if meta.state == S.COPY_SEGMENT_FINISHED:
                    found = restored.segment_for(TIP, 0, meta.start_offset)
                    assert found is not None and found.segment_id == meta.segment_id
            # the writer's lease, held when the backup was taken, looks held until it expires
            held = restored.current_lease(TIP)
            assert held is not None and held.holder == "copy:writer"
            restored.register_partition(tip("CCCCCCCCCCCCCCCCCCCCCC", "payments", 0))  # it takes writes


def test_a_backup_is_refused_with_one_line_and_nothing_written(sqlite_url: str, tmp_path: Path) -> None:
    store_file = Path(make_url(sqlite_url).database or "")
    with pytest.raises(BackupError, match=r"no metadata store at .*metadata\.db: nothing to back up"):
        backup_store(sqlite_url, tmp_path / "b.db")
    assert not store_file.exists()  # looking for it made no empty store
    with RemoteLogMetadataStore(sqlite_url) as store:
        store.register_partition(TIP)
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"an earlier backup")
    refusals = {
        existing: r"backup file .*existing\.db exists: pass --force to replace it",
        store_file: r"is the metadata store itself",
        Path(f"{store_file}-wal"): r"is the metadata store itself",
        tmp_path: r"is a directory",
        tmp_path / "missing" / "b.db": r"directory .*missing does not exist",
    }
    for target, reason in refusals.items():
        with pytest.raises(BackupError, match=reason) as refused:
            backup_store(sqlite_url, target)
        assert "\n" not in str(refused.value)
    assert existing.read_bytes() == b"an earlier backup"
    done = backup_store(sqlite_url, existing, force=True)
    assert done.revision == head_revision() and existing.read_bytes()[:16] == b"SQLite format 3\x00"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".partial", ".partial-journal"))]
    not_a_store = tmp_path / "other.db"
    with sqlite3.connect(not_a_store) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(BackupError, match=r"other\.db holds no metadata schema"):
        backup_store(f"sqlite:///{not_a_store}", tmp_path / "b.db")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(BackupError, match=r"cannot back up metadata store .*garbage\.db: file is not a database"):
        backup_store(f"sqlite:///{garbage}", tmp_path / "b.db")
    assert not (tmp_path / "b.db").exists()
    assert not list(tmp_path.glob(".b.db.*"))


def test_postgresql_is_refused_pointing_at_pg_dump_and_naming_no_password(tmp_path: Path) -> None:
    url = "postgresql+psycopg://tiering:s3cret-pw@db.invalid:5432/tiering"
    with pytest.raises(BackupError) as refused:
        backup_store(url, tmp_path / "b.db")
    message = str(refused.value)
    assert "pg_dump -Fc" in message and 'docs/upgrading.md "Backup and recovery"' in message
    assert "s3cret-pw" not in message and "\n" not in message
    assert not (tmp_path / "b.db").exists()


def test_an_older_store_is_backed_up_as_it_is(sqlite_url: str, tmp_path: Path) -> None:
    """The backup before an upgrade: it holds the older revision, refused on open like the store,
    and the upgrade works on the restored copy too."""
    with RemoteLogMetadataStore(sqlite_url) as store:
        lease = store.acquire_lease(TIP, "t")
        kept = finish(store, lease, segment(TIP, 0, 99))
    downgrade(sqlite_url, "0005_counters")
    done = backup_store(sqlite_url, tmp_path / "before-upgrade.db")
    assert done.revision == "0005_counters"
    restored = restore_sqlite(done.path, tmp_path / "restored")
    refused_then_upgraded(restored, "0005_counters")
    with RemoteLogMetadataStore(restored) as store:
        found = store.segment_for(TIP, 0, 50)
        assert found is not None and found.segment_id == kept.segment_id


# -- PostgreSQL: the recipe of docs/upgrading.md ---------------------------------------------------


def readme_commands(*starts: str) -> list[str]:
    """The shell lines of docs/upgrading.md, "Backup and recovery", that start with one of ``starts``, as
    written and in their order."""
    text = (ROOT / "docs/upgrading.md").read_text()
    section = text.split("\n## Backup and recovery\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.startswith(starts)]


def run_recipe(line: str, env: dict[str, str], cwd: Path | None = None) -> None:
    """One line of the recipe run by bash; the variables it reads come from ``env`` (``set -u``)."""
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", line], env=env, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{line}: {proc.stderr.strip()}"


def test_the_readme_pg_dump_recipe_restores_a_store_the_platform_opens(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    bindir = pg_bindir()
    if bindir is None or not (bindir / "pg_dump").exists() or not (bindir / "pg_restore").exists():
        unavailable("pg_dump and pg_restore", f"no pg_dump and pg_restore beside the test server's binaries ({bindir})")
    (dump,) = readme_commands("pg_dump ")
    (restore,) = readme_commands("pg_restore ")
    # the recipe takes the server, role and password from the environment, never from its command line
    for line in (dump, restore):
        assert "password" not in line.lower() and "@" not in line, line
    with RemoteLogMetadataStore(pg_url) as store:
        lease = store.acquire_lease(TIP, "copy:before-dump")
        for i in range(5):
            finish(store, lease, segment(TIP, 10 * i, 10 * i + 9))
        store.update_segment_state(store.list_segments(TIP)[0].segment_id, S.DELETE_SEGMENT_STARTED, lease)
        store.release_lease(lease)
        token = lease.token
        dumped = store.list_segments(TIP, include_deleted=True)
    source = make_url(pg_url)
    with pg_server.database() as restored_url:
        restored = make_url(restored_url)
        env = {
            "PATH": f"{bindir}:{os.environ['PATH']}",
            "HOME": str(tmp_path),
            "PGHOST": str(source.host),
            "PGPORT": str(source.port),
            "PGUSER": str(source.username),
            "PGDATABASE": str(source.database),
            "BACKUP": str(tmp_path / "tiering.dump"),
            "RESTORED": str(restored.database),
        }
        if source.password:
            env["PGPASSWORD"] = source.password
        run_recipe(dump, env)
        assert (tmp_path / "tiering.dump").read_bytes()[:5] == b"PGDMP"  # the custom format
        run_recipe(restore, env)
        assert current_revision(restored_url) == head_revision()
        with RemoteLogMetadataStore(restored_url) as store:
            assert store.list_segments(TIP, include_deleted=True) == dumped
            # the sequences came along: new rows and new leases continue where the dump left off
            assert store.acquire_lease(TIP, "copy:after-restore", ttl_ms=1).token == token + 1
            store.register_partition(tip("CCCCCCCCCCCCCCCCCCCCCC", "payments", 0))
            assert len(store.list_partitions()) == 2
