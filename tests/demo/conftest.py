from __future__ import annotations

from tests.kafka.conftest import log_dir, make_writer

__all__ = ["log_dir", "make_writer"]
