#!/usr/bin/env bash
# The test command: set up on a fresh machine, lint, type-check, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
VENV=${TIERING_VENV:-$(pwd)/.venv}
export PATH="$VENV/bin:$PATH"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# The deployment test (tests/deploy) starts docker/'s stack on a Docker engine of its own: Debian's
# docker.io, a Debian base image and every image of the stack are made now, while the network is
# there, in the background beside the checks and the suite; the test waits for them.
docker_log=${TIERING_TEST_CACHE:-$HOME/.cache/tiering-test}/docker/prepare.log
mkdir -p "$(dirname "$docker_log")"
echo "== docker images (in the background: $docker_log)"
python -m tests.deploy.engine prepare > "$docker_log" 2>&1 &
# The tools tests run from Debian's packages (promtool for docker/prometheus' alert rules), now,
# while the network is there; a test that still finds one missing says why.
echo "== tools"; python -m tests.deploy.engine tools || true
echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy
# The real-Kafka tests run Apache Kafka from jars fetched once with Maven (or KAFKA_HOME's): fetch
# them now, while the network is there; without them those tests say why they cannot run. The same
# for the Schema Registry the typed-export tests run (Apicurio Registry from Maven Central).
echo "== kafka"; python -m tests.real_kafka.cluster fetch || true
echo "== schema registry"; python -m tests.export.registry_server fetch || true
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
  echo "== pytest (in a private network namespace: loopback only)"
  exec unshare --net bash -c 'ip link set lo up && exec pytest -n "$0" "$@"' "$workers" "$@"
fi
echo "== pytest"; pytest -n "$workers" "$@"
