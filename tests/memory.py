"""Memory bounds measured as they should be: in a fresh interpreter, by its own peak RSS.

The peak is the child's ``VmHWM``: ``ru_maxrss`` would carry the test runner's peak over the
fork and exec that start the child, so a large test process could fail or hide a bound.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PEAK = (
    "\nprint(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:')) // 1024)\n"
)


def run_measured(script: str, *args: str, timeout: float = 120) -> tuple[str, int]:
    """Run ``script`` (which may print a result) with ``args`` in a fresh interpreter from the
    checkout; returns what it printed and its own peak RSS in MiB."""
    done = subprocess.run(
        [sys.executable, "-c", script + _PEAK, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *printed, peak_mib = done.stdout.strip().split("\n")
    return "\n".join(printed), int(peak_mib)
