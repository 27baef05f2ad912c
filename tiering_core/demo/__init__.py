"""The embedded demo and the Kafka log writer it and the tests use to make broker log dirs."""

from __future__ import annotations
