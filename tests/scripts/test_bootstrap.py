"""scripts/bootstrap.sh names what the machine lacks: Chromium (an error only under CI), Java (without
blaming the virtualenv), PostgreSQL; a failing apt-get shows its output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
#: The uv version the bootstrap installs its pins with.
UV_VERSION = next(
    line.split("=", 1)[1]
    for line in (ROOT / "scripts" / "bootstrap.sh").read_text().splitlines()
    if line.startswith("UV_VERSION=")
)
SEARCHED = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def machine_without(tmp_path: Path, *absent: str, extra: dict[str, str] | None = None) -> Path:
    """A PATH directory holding every command of this machine except ``absent`` (plus ``extra`` scripts)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in SEARCHED:
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name in absent or link.exists() or link.is_symlink():
                continue
            link.symlink_to(entry.path)
    for name, body in (extra or {}).items():
        script = bin_dir / name
        script.write_text(body)
        script.chmod(0o755)
    return bin_dir


def bootstrap(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "TIERING_CHROMIUM")}
    return subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "bootstrap.sh")],
        env={**base, "PATH": str(bin_dir), "TIERING_VENV": str(VENV), **env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


CHROMIUMS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture()
def no_chromium(tmp_path: Path) -> Path:
    # apt-get is absent too, so the script cannot install a browser.
    return machine_without(tmp_path, *CHROMIUMS, "apt-get")


def test_missing_chromium_fails_under_ci(no_chromium: Path) -> None:
    proc = bootstrap(no_chromium, CI="true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "chromium: none of chromium chromium-browser google-chrome is on PATH" in proc.stderr
    assert "CI requires the Tiering page screenshot" in proc.stderr


def test_missing_chromium_is_a_warning_outside_ci(no_chromium: Path) -> None:
    proc = bootstrap(no_chromium)
    assert "WARNING: chromium:" in proc.stderr and "will skip the Tiering page screenshot" in proc.stderr
    assert "CI requires" not in proc.stderr


def test_chromium_named_by_the_environment(no_chromium: Path, tmp_path: Path) -> None:
    browser = tmp_path / "opt" / "my-chrome"
    browser.parent.mkdir()
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    proc = bootstrap(no_chromium, CI="true", TIERING_CHROMIUM=str(browser))
    assert f"bootstrap: chromium: {browser}" in proc.stdout and "chromium:" not in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="bootstrap installs Chromium only as root")
def test_a_failing_apt_get_shows_its_output(tmp_path: Path) -> None:
    failing_apt = "#!/bin/sh\necho 'E: Unable to locate package chromium' >&2\nexit 100\n"
    proc = bootstrap(machine_without(tmp_path, *CHROMIUMS, "apt-get", extra={"apt-get": failing_apt}))
    assert "bootstrap: apt-get update failed; the last lines of its output:" in proc.stderr
    assert "E: Unable to locate package chromium" in proc.stderr


def test_without_java_spark_is_not_blamed(tmp_path: Path) -> None:
    proc = bootstrap(machine_without(tmp_path, "java"))
    assert proc.returncode == 1
    assert "java: not found (install a JDK 17+" in proc.stderr
    assert "spark-submit" not in proc.stderr and "delete" not in proc.stderr


def test_postgresql_server_binaries_are_found_where_the_tests_look(tmp_path: Path) -> None:
    from tests.services import pg_bindir

    expected = pg_bindir()
    if expected is None:
        pytest.skip("no PostgreSQL server binaries on this machine")
    proc = bootstrap(machine_without(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"bootstrap: postgresql server binaries: {expected}\n" in proc.stdout


def recorder(path: Path, calls: Path) -> Path:
    """A stand-in command at ``path`` that appends its arguments to ``calls`` and succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $*" >> {calls}\n')
    path.chmod(0o755)
    return path


def stand_in_bootstrap(tmp_path: Path, *, uv: bool) -> list[str]:
    """The commands the bootstrap gives a stand-in venv's python (and, with ``uv``, a stand-in uv
    in the cache), in order, one line each: nothing real is installed."""
    calls = tmp_path / "calls"
    venv = tmp_path / "venv"
    recorder(venv / "bin" / "python", calls)
    cache = tmp_path / "cache"
    if uv:
        recorder(cache / "tiering-bootstrap" / f"uv-{UV_VERSION}" / "bin" / "uv", calls)
    subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "bootstrap.sh")],
        env={**os.environ, "TIERING_VENV": str(venv), "TIERING_CHROMIUM": "true", "XDG_CACHE_HOME": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    return calls.read_text().splitlines()


def installs(commands: list[str]) -> list[str]:
    return [line for line in commands if " install " in line]


def test_the_pins_are_installed_by_uv_from_the_cache_else_by_pip(tmp_path: Path) -> None:
    """uv, the bootstrap's own tool, installs exactly the pins pip would: the requirements under
    constraints.txt, pyspark again last, the project without build isolation; where uv cannot be
    had (here: its install leaves nothing), pip installs the same."""
    venv_python = tmp_path / "with-uv" / "venv" / "bin" / "python"
    with_uv = installs(stand_in_bootstrap(tmp_path / "with-uv", uv=True))
    uv = f"uv pip install --quiet --python {venv_python}"
    assert with_uv[1:] == [
        f"{uv} -r requirements.txt -c constraints.txt",
        f"{uv} --no-deps --reinstall -c constraints.txt pyspark",
        f"{uv} --no-deps --no-build-isolation -e .",
    ]
    without = installs(stand_in_bootstrap(tmp_path / "without", uv=False))
    assert without[1].startswith("python -m pip install -q --target ") and without[1].endswith(f" uv=={UV_VERSION}")
    assert without[2:] == [
        "python -m pip install -q -r requirements.txt -c constraints.txt",
        "python -m pip install -q --no-deps --force-reinstall -c constraints.txt pyspark",
        "python -m pip install -q --no-deps --no-build-isolation -e .",
    ]


def test_pip_and_setuptools_move_to_the_pinned_versions_first(tmp_path: Path) -> None:
    """A new venv carries pip and setuptools with known vulnerabilities: the bootstrap upgrades both,
    to the versions constraints.txt pins, before installing anything. A stand-in venv records what
    its python is asked to do, so no real environment changes."""
    pins = dict(
        line.strip().split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.startswith(("pip==", "setuptools=="))
    )
    assert set(pins) == {"pip", "setuptools"}
    # Versions with the fixes of CVE-2025-8869 (pip 25.3) and CVE-2025-47273 (setuptools 78.1.1).
    assert tuple(int(p) for p in pins["pip"].split(".")[:2]) >= (25, 3)
    assert tuple(int(p) for p in pins["setuptools"].split(".")[:3]) >= (78, 1, 1)
    first = stand_in_bootstrap(tmp_path, uv=False)[0]
    assert first == f"python -m pip install -q pip=={pins['pip']} setuptools=={pins['setuptools']}"
