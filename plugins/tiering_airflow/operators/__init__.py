"""Thin operators for copy, retention, partition removal and DeleteRecords of one partition."""

from __future__ import annotations
