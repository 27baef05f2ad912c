#!/usr/bin/env bash
# Create (or reuse) the project's virtualenv and install everything from the pinned
# constraints. Idempotent: a second run with unchanged pins only re-checks the tools.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${TIERING_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}

stamp_of() { cat requirements.txt constraints.txt setup.cfg | sha256sum | cut -d' ' -f1; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$VENV/.tiering-stamp" 2>/dev/null)" != "$(stamp_of)" ]; then
  echo "bootstrap: installing pinned dependencies (a few minutes on a fresh machine)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r requirements.txt -c constraints.txt
  # pyspark-client (pulled in by the Spark provider) shares files with the full pyspark
  # wheel; reinstall pyspark last so spark-submit and its jars are intact.
  "$VENV/bin/python" -m pip install -q --no-deps --force-reinstall -c constraints.txt pyspark
  "$VENV/bin/python" -m pip install -q --no-deps -e .
  stamp_of > "$VENV/.tiering-stamp"
fi

# Headless Chromium screenshots the Tiering page in the end-to-end test (optional).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing chromium for the UI screenshot test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "bootstrap: chromium could not be installed; the UI screenshot will be skipped" >&2
fi

missing=()
if ! command -v java >/dev/null 2>&1; then
  missing+=("java: not found (install a JDK 17+, e.g. apt-get install openjdk-17-jre-headless)")
else
  jv=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  if [ -z "$jv" ] || [ "$jv" -lt 17 ]; then
    missing+=("java: version ${jv:-unknown} found, 17 or newer is required")
  fi
fi
if ! PATH="$VENV/bin:$PATH" "$VENV/bin/spark-submit" --version >/dev/null 2>&1; then
  missing+=("spark-submit: $VENV/bin/spark-submit does not run (pyspark install is broken; delete $VENV and rerun)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: missing requirements:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "bootstrap: ready ($VENV)"
