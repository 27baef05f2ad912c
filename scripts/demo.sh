#!/usr/bin/env bash
# The main job on embedded defaults: a demo Kafka log dir, SQLite metadata, a local S3
# endpoint, local Spark. Everything lands under ./demo-run (override with DEMO_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
VENV=${TIERING_VENV:-$(pwd)/.venv}
export PATH="$VENV/bin:$PATH"
exec tiering demo --dir "${DEMO_DIR:-$(pwd)/demo-run}" "$@"
