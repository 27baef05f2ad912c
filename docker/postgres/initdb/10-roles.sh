# The stack's roles and databases, made at the first start by the postgres service's entry point
# (the official image's, and docker/debian's likewise) on a server that listens on its Unix socket
# only. Each database is owned by a login role of its own, none of them a superuser; the
# superuser's password (POSTGRES_PASSWORD) stays in the postgres service:
# - airflow: Airflow's metadata database, for the Airflow components but the Celery workers (their
#   tasks reach it only through the API server's Task Execution API);
# - celery_results: Celery's task results, for the scheduler and the Celery workers;
# - tiering: the platform's metadata store. Its schema migrations keep their version in the
#   database they migrate, as Airflow's do, so the two must not share one;
# - iceberg: the export's Iceberg catalog (pyiceberg's SQL catalog: its tables of table pointers),
#   for the processes that open it (the default queue's worker, the API server).
# Each role may connect to its own database only. The entry point sources this file (or runs it,
# when executable): it sets no shell option. psql reads the passwords from the environment
# (\getenv), never from a command line.
: "${AIRFLOW_DB_PASSWORD:?AIRFLOW_DB_PASSWORD is not set}"
: "${CELERY_RESULTS_PASSWORD:?CELERY_RESULTS_PASSWORD is not set}"
: "${TIERING_METADATA_PASSWORD:?TIERING_METADATA_PASSWORD is not set}"
: "${ICEBERG_CATALOG_PASSWORD:?ICEBERG_CATALOG_PASSWORD is not set}"
psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "${POSTGRES_USER:-postgres}" --dbname postgres <<'SQL'
-- No statement of this session goes to the server's log, not even one that fails: they hold passwords.
SET log_statement = 'none';
SET log_min_error_statement = panic;
\getenv airflow_password AIRFLOW_DB_PASSWORD
\getenv celery_results_password CELERY_RESULTS_PASSWORD
\getenv tiering_password TIERING_METADATA_PASSWORD
\getenv iceberg_password ICEBERG_CATALOG_PASSWORD
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE celery_results LOGIN PASSWORD :'celery_results_password';
CREATE DATABASE celery_results OWNER celery_results;
CREATE ROLE tiering LOGIN PASSWORD :'tiering_password';
CREATE DATABASE tiering OWNER tiering;
CREATE ROLE iceberg LOGIN PASSWORD :'iceberg_password';
CREATE DATABASE iceberg OWNER iceberg;
REVOKE ALL ON DATABASE airflow, celery_results, tiering, iceberg FROM PUBLIC;
SQL
