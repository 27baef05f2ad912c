"""Fetching a Java server's jars with Maven on a machine without ``mvn``: Debian's ``maven`` is asked
for first, and a fetch that cannot have it is one line naming it (``apt-get`` here is a stand-in
that fails the install, so the machine's real packages are not touched)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.deploy.test_engine import failing_apt_get
from tests.maven import fetch_dependencies
from tests.services import ServiceUnavailable


def test_a_fetch_without_mvn_asks_apt_get_for_maven_before_the_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt-get.log"
    failing_apt_get(bin_dir, log)
    monkeypatch.setenv("PATH", str(bin_dir))  # no mvn
    monkeypatch.setenv("TIERING_TEST_CACHE", str(tmp_path / "cache"))
    pom = tmp_path / "pom.xml"
    pom.write_text("<project/>")
    with pytest.raises(ServiceUnavailable) as refused:
        fetch_dependencies(pom, tmp_path / "home", "the test's jars", "*.jar")
    (line,) = str(refused.value).splitlines()
    assert "maven" in line, line
    if os.geteuid() == 0:
        assert log.read_text().splitlines() == ["update -qq", "install -y -qq --no-install-recommends maven"]
    else:
        assert "needs root" in line and not log.exists(), line
    assert not (tmp_path / "home" / "libs").exists()
