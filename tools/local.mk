# tools/: programs people run.
