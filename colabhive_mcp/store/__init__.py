"""The instance store: what the processes of one instance (gunicorn's workers) share, in memory for
one process or in SQLite and memory-mapped counts for several, and the interface both keep."""
