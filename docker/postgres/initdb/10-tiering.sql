-- The platform's metadata store has a database of its own: its schema migrations keep their
-- version in the database they migrate, as Airflow's do, so the two must not share one.
CREATE DATABASE tiering OWNER airflow;
