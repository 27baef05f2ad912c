"""Thin operators for copy, retention and partition removal of one partition."""

from __future__ import annotations
