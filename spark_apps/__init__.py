"""PySpark applications launched with SparkSubmitOperator; each is a few lines over tiering_core."""

from __future__ import annotations
