"""The install step of the deployment test's engine, run with the tools absent.

A fresh machine has none of Debian's ``docker.io``, ``docker-compose`` or ``debootstrap``: the
test command's ``prepare`` (and the test's fixture) must install them before the first use, and a
tool that cannot be installed is one line naming it, never a traceback of the first command run.
The commands are looked up on a ``PATH`` that holds none of them; ``apt-get`` there is a stand-in
that records what it was asked and fails the install (the fault injected on purpose: this machine's
real packages are not removed by a test).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.engine import HOST_PACKAGES, REPO, TOOL_PACKAGES, install_engine
from tests.services import ServiceUnavailable


def failing_apt_get(bin_dir: Path, log: Path) -> None:
    """An ``apt-get`` whose update works and whose install finds no package, logging each call."""
    script = bin_dir / "apt-get"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        'if [ "$1" = update ]; then exit 0; fi\n'
        'echo "E: Unable to locate package debootstrap" >&2\n'
        "exit 100\n"
    )
    script.chmod(0o755)


def test_prepare_with_the_tools_absent_installs_them_before_the_first_use(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt-get.log"
    failing_apt_get(bin_dir, log)
    env = {
        **os.environ,
        "PATH": str(bin_dir),  # none of dockerd, docker, docker-compose, debootstrap
        "TIERING_TEST_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.deploy.engine", "prepare"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    packages = sorted(set(HOST_PACKAGES.values()))
    assert all(name in lines[0] for name in packages), lines[0]
    if os.geteuid() == 0:
        calls = log.read_text().splitlines()
        assert calls[0] == "update -qq", calls
        assert calls[1].split()[-len(packages) :] == packages, calls
        assert "Unable to locate package" in lines[0], lines[0]
    else:
        assert "needs root" in lines[0], lines[0]
    assert not list((tmp_path / "cache" / "docker").glob("base-*")), "nothing was made without the tools"


def test_present_tools_are_not_installed_again(tmp_path: Path) -> None:
    log = tmp_path / "apt-get.log"
    failing_apt_get(tmp_path, log)
    for command in HOST_PACKAGES:
        (tmp_path / command).symlink_to("/bin/true")
    install_engine(path=str(tmp_path))
    assert not log.exists()


def test_a_tool_the_install_does_not_bring_is_named(tmp_path: Path) -> None:
    """apt-get says it installed the packages, yet a command is still missing: one line naming it
    (not as root, the install is not tried, and the line says so, naming it all the same)."""
    script = tmp_path / "apt-get"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    for command in HOST_PACKAGES:
        if command != "debootstrap":
            (tmp_path / command).symlink_to("/bin/true")
    if os.geteuid() == 0:
        why = r"^no Docker engine: debootstrap still missing after apt-get install debootstrap$"
    else:
        why = r"^no Docker engine: debootstrap missing and installing needs root$"
    with pytest.raises(ServiceUnavailable, match=why):
        install_engine(path=str(tmp_path))


def test_the_tools_command_installs_the_other_tests_tools_before_the_suite(tmp_path: Path) -> None:
    """``python -m tests.deploy.engine tools`` (the test command's step before the suite): with
    promtool absent it asks apt-get for Debian's package of it, and one line says it could not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt-get.log"
    failing_apt_get(bin_dir, log)
    env = {**os.environ, "PATH": str(bin_dir), "TIERING_TEST_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.deploy.engine", "tools"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    packages = sorted(set(TOOL_PACKAGES.values()))
    assert all(name in line for name in packages), line
    if os.geteuid() == 0:
        assert log.read_text().splitlines()[1].split()[-len(packages) :] == packages
    else:
        assert "needs root" in line, line
