#!/usr/bin/env bash
# The test command: set up on a fresh machine, lint, type-check, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
VENV=${TIERING_VENV:-$(pwd)/.venv}
export PATH="$VENV/bin:$PATH"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
echo "== ruff"; ruff check .
echo "== mypy"; mypy
# Two test processes by default (the suite waits on servers and subprocesses as much as it computes);
# TIERING_TEST_WORKERS=0 runs it in this process.
echo "== pytest"; pytest -n "${TIERING_TEST_WORKERS:-2}" "$@"
