"""The lifecycle of a run: start, stop, resume, continue, delete, status, the index of runs and their lookup."""
