#!/usr/bin/env bash
# The test command: set up on a fresh machine, lint, type-check, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's line gives the seconds since the command started.
step() { echo "== $1 (at ${SECONDS} s)"; }
bash scripts/bootstrap.sh
VENV=${TIERING_VENV:-$(pwd)/.venv}
export PATH="$VENV/bin:$PATH"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# The suite starts Python hundreds of times (the CLI, Airflow's task processes, Spark's workers):
# each reads the project's compiled modules from __pycache__ (ignored by git and by the image
# build) rather than compiling every module again, whatever the machine's environment says.
unset PYTHONDONTWRITEBYTECODE
# The deployment test (tests/deploy) starts docker/'s stack on a Docker engine of its own: Debian's
# docker.io, a Debian base image and every image of the stack are made now, while the network is
# there, in the background beside the checks and the suite; the test waits for them.
docker_log=${TIERING_TEST_CACHE:-$HOME/.cache/tiering-test}/docker/prepare.log
mkdir -p "$(dirname "$docker_log")"
step "docker images (in the background: $docker_log)"
python -m tests.deploy.engine prepare > "$docker_log" 2>&1 &
# What the tests fetch, now, while the network is there, beside the lint and type checks (each job's
# output is shown when it ends): the tools they run from Debian's packages (promtool for
# docker/prometheus' alert rules); Apache Kafka's jars, fetched once with Maven (or KAFKA_HOME's);
# the Schema Registry the typed-export tests run (Apicurio Registry from Maven Central) and Apache
# Iceberg's REST catalog server the export tests run beside the SQL catalog. A test that
# still finds one missing says why (a failure under CI).
fetch_dir=$(mktemp -d)
python -m tests.deploy.engine tools > "$fetch_dir/tools" 2>&1 &
tools_job=$!
{ python -m tests.real_kafka.cluster fetch; python -m tests.export.registry_server fetch; python -m tests.export.rest_catalog fetch; } > "$fetch_dir/maven" 2>&1 &
maven_job=$!
step "ruff"; ruff check . && ruff format --check .
step "mypy"; mypy
wait "$tools_job" || true; step "tools"; cat "$fetch_dir/tools"
wait "$maven_job" || true; step "kafka, schema registry, REST catalog"; cat "$fetch_dir/maven"
rm -rf "$fetch_dir"
# Every test's time of the last run is kept beside the test cache (JUnit XML), for a look at where
# the suite's time goes; the 30 slowest are printed at the end.
junit=${TIERING_TEST_CACHE:-$HOME/.cache/tiering-test}/last-run.xml
# Two test processes by default (the suite waits on servers and subprocesses as much as it computes);
# TIERING_TEST_WORKERS=0 runs it in this process.
workers=${TIERING_TEST_WORKERS:-2}
# Under CI (or with TIERING_TEST_ISOLATED=1), as root and with no external test server named, the
# tests run in a network namespace of their own that has only loopback: proof that they start every
# server they use and never reach one the machine runs (5432, 6379, ...).
in_ci() { case "${CI:-}" in "" | 0 | false | False | FALSE | no) return 1 ;; *) return 0 ;; esac; }
external=${TIERING_TEST_PG_URL:-}${TIERING_TEST_REDIS_URL:-}${TIERING_TEST_SPARK_MASTER:-}
if { in_ci || [ "${TIERING_TEST_ISOLATED:-}" = 1 ]; } && [ -z "$external" ] && [ "$(id -u)" = 0 ] \
  && [ "${TIERING_TEST_ISOLATED:-}" != 0 ] && unshare --net true 2>/dev/null && command -v ip >/dev/null; then
  step "pytest (in a private network namespace: loopback only)"
  exec unshare --net bash -c 'ip link set lo up && exec pytest -n "$0" --junitxml="$1" "${@:2}"' "$workers" "$junit" "$@"
fi
step "pytest"; pytest -n "$workers" --junitxml="$junit" "$@"
