"""Runs: a training run is a folder on disk; this package owns its layout and its processes."""
