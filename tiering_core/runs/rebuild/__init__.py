"""Rebuilding and checking the indexes of remote segments against what copy recorded."""

from __future__ import annotations
