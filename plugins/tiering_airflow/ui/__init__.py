"""The Tiering page: a FastAPI app mounted in the Airflow API server."""

from __future__ import annotations
