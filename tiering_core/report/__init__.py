"""The reporting layer of every entry point (the ``tiering`` command, the Spark apps, the Airflow
tasks): what a run's events and results read as, and where the words go. It imports the runs'
values, never the command line."""
