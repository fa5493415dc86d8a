"""The built-in tiny model, built offline (build.py), and the shipped dataset (data/)."""
