"""The reporting layer of every entry point (the ``tiering`` command, the Spark apps, the Airflow
tasks): what a run's events and results read as, and where the words go.

The runs return values and emit events; this package alone decides how they read, so the three
entry points print the same words. One concern a module: ``lines`` (the line of each run event),
``results`` (a finished run's lines), ``summaries`` (the last line of a run over partitions),
``tables`` (``status`` and ``segments``), ``records`` (``fetch``'s records), ``output`` (console
or JSON) and ``exit_codes``. It imports the runs' values, never the command line.
"""
