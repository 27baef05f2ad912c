"""The code a Spark app ships to its executors: a zip of ``tiering_core`` and ``spark_apps``, built
once per process in a private directory and added with ``addPyFile``, so workers need only the
third-party packages, never this checkout."""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

REPO_ROOT = Path(__file__).resolve().parent.parent
SHIPPED_PACKAGES = ("tiering_core", "spark_apps")

#: This process's code bundle, in a directory only this process created (see ``package_zip``).
_BUNDLE: Path | None = None


def package_zip() -> Path:
    """A zip of our packages' Python sources, built once per process in a private directory.

    ``addPyFile`` puts the bundle first on every executor's path, so whoever can write it runs
    code with the job's credentials: it is never looked up at a predictable shared path (another
    local user could plant one there), only written into a fresh ``mkdtemp`` directory (mode
    0700, ours) and removed when the process exits.
    """
    global _BUNDLE
    if _BUNDLE is not None and _BUNDLE.is_file():
        return _BUNDLE
    files: list[tuple[Path, str]] = []
    for package in SHIPPED_PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed", ".ini", ".mako"):
                files.append((path, str(path.relative_to(REPO_ROOT))))
    digest = hashlib.sha256()
    for path, name in files:
        digest.update(name.encode())
        digest.update(path.read_bytes())
    private = Path(tempfile.mkdtemp(prefix="tiering-spark-"))
    atexit.register(shutil.rmtree, private, ignore_errors=True)
    target = private / f"tiering-spark-{digest.hexdigest()[:16]}.zip"
    with zipfile.ZipFile(target, "x", zipfile.ZIP_DEFLATED) as archive:
        for path, name in files:
            archive.write(path, name)
    _BUNDLE = target
    return target


def ship_packages(sc: SparkContext) -> None:
    """Make ``tiering_core`` and ``spark_apps`` importable on every executor (once per context)."""
    if getattr(sc, "_tiering_packages_shipped", False):
        return
    sc.addPyFile(str(package_zip()))
    sc._tiering_packages_shipped = True  # type: ignore[attr-defined]
