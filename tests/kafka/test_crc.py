"""CRC-32C: Kafka's checksum, and a warning when the machine computes it in software."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from tiering_core.kafka import crc as crc_module

ROOT = Path(__file__).resolve().parents[2]


def test_crc32c_check_value_and_continuation() -> None:
    assert crc_module.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc_module.crc32c(b"56789", crc_module.crc32c(b"1234")) == 0xE3069283


def test_a_software_crc32c_is_warned_about_once(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setattr(crc32c, "hardware_based", False)
    monkeypatch.setattr(crc_module, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="tiering_core.kafka.crc"):
        assert crc_module.check_hardware_acceleration() is False
        assert crc_module.check_hardware_acceleration() is False
    assert caplog.text.count("not hardware-accelerated") == 1
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_hardware_crc32c_is_not_warned_about(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setattr(crc32c, "hardware_based", True)
    monkeypatch.setattr(crc_module, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="tiering_core.kafka.crc"):
        assert crc_module.check_hardware_acceleration() is True
    assert not caplog.records


@pytest.mark.parametrize("hardware", [False, True])
def test_the_check_runs_when_the_module_is_imported(hardware: bool) -> None:
    script = (
        "import logging, crc32c\n"
        f"crc32c.hardware_based = {hardware}\n"
        "logging.basicConfig(format='%(levelname)s %(message)s')\n"
        "import tiering_core.kafka.crc\n"
        "import tiering_core.kafka.batch\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("WARNING the crc32c package is not hardware-accelerated") == (0 if hardware else 1)
