"""A run folder and its processes, shared by runs and jobs alike: the files of a folder and its state
(layout.py), proof of which processes are a folder's and signalling them (process.py), the one supervisor
loop (supervise.py), the one reconciler (reconcile.py), a log read for its failure (diagnose.py) and the
one verdict on a checkpoint folder (checkpoint_verdict.py).
"""
