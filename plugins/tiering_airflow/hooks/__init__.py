"""TieringHook: the platform config plus an Airflow connection -> a TieringContext."""

from __future__ import annotations
