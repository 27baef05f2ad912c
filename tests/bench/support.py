"""Running a benchmark as its smoke tests do: from the repository root, at a small size."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300) -> str:
    """``bench/<script>``'s standard output; a non-zero exit fails the test (its output attached)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=None if env is None else dict(env),
        timeout=timeout,
    ).stdout
