#!/bin/sh
# The platform image's entry point. A service given Spark's shared secret (SPARK_AUTH_SECRET: the
# Spark master and worker, and the Airflow worker that submits the Spark DAGs' jobs) gets it as
# spark-defaults.conf in SPARK_CONF_DIR, readable by this user only, with Spark's authentication
# and its network encryption switched on: the master, the worker and spark-submit read that file
# (spark.authenticate.secret is never on a command line, where every user of the host can read
# it, as Spark's own SPARK_*_OPTS and --conf would put it). The variable itself goes no further
# than this script: the service's processes, tasks among them, are started without it.
set -eu
if [ -n "${SPARK_AUTH_SECRET:-}" ]; then
    mask=$(umask)
    umask 077
    mkdir -p "$SPARK_CONF_DIR"
    printf 'spark.authenticate true\nspark.authenticate.secret %s\nspark.network.crypto.enabled true\n' \
        "$SPARK_AUTH_SECRET" > "$SPARK_CONF_DIR/spark-defaults.conf"
    umask "$mask"
fi
unset SPARK_AUTH_SECRET
exec "$@"
