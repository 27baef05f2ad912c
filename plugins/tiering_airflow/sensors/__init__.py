"""The sensor that waits for a segment eligible for copy."""

from __future__ import annotations
