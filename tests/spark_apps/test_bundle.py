"""The code bundle the Spark apps ship to their executors: built in a private directory, never
looked up at a path another local user could plant a zip at."""

from __future__ import annotations

from pathlib import Path

import pytest


def _shared_bundle_path(tempdir: Path) -> Path:
    """Where the bundle used to be looked up: a name any local user can compute."""
    import hashlib

    from spark_apps import bundle

    digest = hashlib.sha256()
    for package in bundle.SHIPPED_PACKAGES:
        for path in sorted((bundle.REPO_ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed", ".ini", ".mako"):
                digest.update(str(path.relative_to(bundle.REPO_ROOT)).encode())
                digest.update(path.read_bytes())
    return tempdir / f"tiering-spark-{digest.hexdigest()[:16]}.zip"


def test_the_code_bundle_is_built_in_a_private_directory_never_at_a_planted_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another local user may plant a zip at a predictable path in the shared temp dir: the
    executors would import it first. The bundle is only ever written into a fresh directory that
    is this user's and closed to everyone else."""
    import os
    import stat
    import tempfile
    import zipfile

    from spark_apps import bundle

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(bundle, "_BUNDLE", None, raising=False)
    planted = _shared_bundle_path(tmp_path)
    with zipfile.ZipFile(planted, "w") as archive:
        archive.writestr("tiering_core/__init__.py", "raise SystemExit('planted code ran')\n")
    planted_bytes = planted.read_bytes()

    built = bundle.package_zip()
    assert built != planted and built.parent != tmp_path
    assert planted.read_bytes() == planted_bytes  # neither used nor touched
    info = built.parent.stat()
    assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    assert sorted(p.name for p in built.parent.iterdir()) == [built.name]  # no staging file beside it
    with zipfile.ZipFile(built) as archive:
        shipped = archive.read("tiering_core/__init__.py")
    assert shipped == (bundle.REPO_ROOT / "tiering_core" / "__init__.py").read_bytes()
    assert bundle.package_zip() == built  # built once per process
