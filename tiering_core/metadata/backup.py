"""``tiering db backup``: a consistent copy of a SQLite metadata store, taken while runs write.

SQLite's online backup API copies the database in one step under one read transaction; in WAL
mode that transaction is a snapshot of the last commit, so runs keep committing meanwhile and the
copy holds each of their transactions whole or not at all. The copy is written beside the target
under a temporary name, checked, synced, and only then given the target's name: a backup killed
halfway leaves nothing that looks like a backup, and an existing file is replaced only when asked.

A PostgreSQL store is backed up with ``pg_dump`` (docs/upgrading.md, "Backup and recovery"): its dump is a
snapshot as well, and it runs where the server's client tools and credentials are.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tiering_core.config.metadata import safe_url
from tiering_core.metadata.engine import SQLITE_BUSY_TIMEOUT_MS, is_sqlite, sqlite_file
from tiering_core.metadata.errors import BackupError

#: Where the docs show the PostgreSQL recipe.
PG_DUMP_RECIPE = 'docs/upgrading.md "Backup and recovery"'
#: os.link's errors on a filesystem without hard links: the target is then checked, then renamed to.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP})


@dataclass(frozen=True)
class Backup:
    """What a backup wrote: the file, its size and the schema revision it holds (what a restore
    of it needs: the platform version whose head that is, or ``tiering db upgrade``)."""

    path: Path
    size_bytes: int
    revision: str

    def to_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "size_bytes": self.size_bytes, "revision": self.revision}


def backup_store(url: str, target: Path, *, force: bool = False) -> Backup:
    """Copy the SQLite store at ``url`` to ``target`` (refused if it exists, unless ``force``).

    Any schema revision is copied as it is: the backup before an upgrade is the one that matters.
    """
    source = _source_file(url)
    target = target.absolute()
    _check_target(source, target, force)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(fd)
    partial = Path(name)
    try:
        revision = _copy(source, partial)
        _sync(partial)
        _install(partial, target, force)
    finally:
        partial.unlink(missing_ok=True)
        Path(f"{name}-journal").unlink(missing_ok=True)
    _sync_directory(target.parent)
    return Backup(target, target.stat().st_size, revision)


def _source_file(url: str) -> Path:
    source = sqlite_file(url) if is_sqlite(url) else None
    if source is None:
        raise BackupError(
            f"tiering db backup copies SQLite stores; {safe_url(url)} is not one: back it up with "
            f"pg_dump -Fc as {PG_DUMP_RECIPE} shows"
        )
    path = Path(source).absolute()
    if not path.is_file():
        raise BackupError(f"no metadata store at {path}: nothing to back up (check metadata.url)")
    return path


def _check_target(source: Path, target: Path, force: bool) -> None:
    """Refuse a target that is the store itself (or one of its side files), a directory, in a
    directory that does not exist, or an existing file without ``force``."""
    resolved = target.resolve()
    store = source.resolve()
    if resolved in {store, *(store.with_name(store.name + side) for side in ("-wal", "-shm", "-journal"))}:
        raise BackupError(f"backup file {target} is the metadata store itself: name another file")
    if target.is_dir():
        raise BackupError(f"backup file {target} is a directory: name a file in it")
    if not target.parent.is_dir():
        raise BackupError(f"backup file {target}: directory {target.parent} does not exist")
    if target.exists() and not force:
        raise BackupError(f"backup file {target} exists: pass --force to replace it")


def _copy(source: Path, partial: Path) -> str:
    """The whole store copied into ``partial`` in one backup step (one snapshot), then made a
    single self-contained file and checked; returns the schema revision the copy holds."""
    try:
        # mode=rw: never creates the store it is meant to copy.
        src = sqlite3.connect(f"file:{quote(str(source))}?mode=rw", uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot open metadata store {source}: {exc}") from exc
    try:
        dst = sqlite3.connect(partial, isolation_level=None)
        try:
            src.backup(dst, pages=-1)
            dst.execute("PRAGMA journal_mode=DELETE")  # no -wal beside the backup: one file holds it all
            (check,) = dst.execute("PRAGMA quick_check").fetchone()
            if check != "ok":
                raise BackupError(f"the copy of {source} fails SQLite's quick_check ({check}): nothing written")
            return _revision(dst, source)
        finally:
            dst.close()
    except sqlite3.Error as exc:
        raise BackupError(f"cannot back up metadata store {source}: {exc}") from exc
    finally:
        src.close()


def _revision(copy: sqlite3.Connection, source: Path) -> str:
    try:
        row = copy.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError:
        row = None
    if row is None or not row[0]:
        raise BackupError(f"{source} holds no metadata schema (no schema revision): not a metadata store")
    return str(row[0])


def _install(partial: Path, target: Path, force: bool) -> None:
    """Give the checked copy the target's name: replacing it only with ``force``, and otherwise
    by a hard link, which fails if a file of that name appeared meanwhile."""
    if force:
        os.replace(partial, target)
        return
    try:
        os.link(partial, target)
    except FileExistsError:
        raise BackupError(f"backup file {target} exists: pass --force to replace it") from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        if target.exists():
            raise BackupError(f"backup file {target} exists: pass --force to replace it") from None
        os.rename(partial, target)


def _sync(path: Path) -> None:
    with path.open("rb+") as file:
        os.fsync(file.fileno())


def _sync_directory(directory: Path) -> None:
    """The new name made durable (a crash after the backup reported success keeps it)."""
    with contextlib.suppress(OSError):  # some filesystems cannot open or sync a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
