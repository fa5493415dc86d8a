"""The run queue (#25): runs that wait for their memory, started one after another by one keeper.

store.py: the queue file (atomic, locked, a damaged one set aside); admission.py: why an entry waits;
sweep.py: a `[sweep]` grid into profiles; retry.py: the OOM retry that keeps the global batch;
keeper.py: the detached keeper (one per data dir) and `ensure_keeper`.
"""
