"""Plain Python access to Slurm clusters over SSH: connection settings in, typed records out.

Nothing here imports Django, so the library can be tested and benchmarked on its own."""
