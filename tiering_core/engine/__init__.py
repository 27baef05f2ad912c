"""What every driver shares, below them all: where a run's tasks execute (``executor``), holding a
partition or a table (``lease``), the store and prefix bound to each other (``binding``), a remote
segment's references, deletion and the clean-up of what killed runs left (``segment_ops``), the
partition's state object (``partition_state``), one object downloaded and checked (``download``),
items made ahead of their consumer (``read_ahead``) and fewer garbage collections while a run
builds what it keeps for thousands of partitions (``allocation``).

The drivers (``runs``, ``read``, ``export``, ``replay``) and the Spark apps reach here, never into
one another's packages for it; this package imports no driver and nothing above the store."""
