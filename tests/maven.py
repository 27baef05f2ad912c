"""Java servers' jars for the tests, fetched once with Maven into the test cache.

A pom's runtime dependencies are copied (``mvn dependency:copy-dependencies``) into a staging
directory and renamed into place, one fetch at a time; a finished fetch is marked with the pom's
digest, so a changed pom fetches again. The test command fetches before the suite, while the
network is there, and installs Debian's ``maven`` first where ``mvn`` is missing; a fetch that
cannot run is ``ServiceUnavailable`` in one line.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.services import ServiceUnavailable, last_line

FETCH_TIMEOUT = 900.0


def fetch_dependencies(pom: Path, home: Path, what: str, expect: str) -> Path:
    """``home/libs``: the runtime dependencies of ``pom`` (``what`` names them in errors; the glob
    ``expect`` must match a fetched jar)."""
    libs = home / "libs"
    marker = home / "fetched"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()

    def fetched() -> bool:
        return marker.is_file() and marker.read_text().strip() == digest

    if fetched():
        return libs
    # Imported here: tests.deploy.engine imports tests.real_kafka.cluster, which imports this module.
    from tests.deploy.engine import install_debian_packages

    install_debian_packages({"mvn": "maven"}, f"cannot fetch {what}")  # before its first use
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceUnavailable(f"cannot fetch {what}: mvn is not on PATH")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if fetched():
            return libs
        staging = Path(tempfile.mkdtemp(prefix="libs-", dir=home))
        try:
            args = ["-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={staging}"]
            proc = subprocess.run(
                [mvn, *args, "-DincludeScope=runtime"], capture_output=True, text=True, timeout=FETCH_TIMEOUT
            )
            if proc.returncode != 0:
                raise ServiceUnavailable(f"mvn could not fetch {what}: {last_line(proc.stdout + proc.stderr)}")
            if not any(staging.glob(expect)):
                raise ServiceUnavailable(f"mvn fetched no {expect} for {what} into {staging}")
            if libs.exists():
                shutil.rmtree(libs)
            staging.rename(libs)
            marker.write_text(digest + "\n")
        except subprocess.TimeoutExpired as exc:
            raise ServiceUnavailable(f"mvn did not fetch {what} within {FETCH_TIMEOUT:.0f} s") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return libs
