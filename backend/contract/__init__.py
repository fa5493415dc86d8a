"""What the trainer and the app agree on: the files one process writes and another reads.

    events.py        the typed events schema of events.jsonl (versioned) and its incremental reader
    save_request.py  <run>/save.request: a checkpoint (and a stop) asked of the running trainer
    heartbeat.py     the trainer's heartbeat and stack-dump files the watchdog reads
    alerts.py        <run>/watch/alerts.jsonl: the alerts the watchdog and the final state write

The plugin (backend.plugin, inside swift's process) imports only this room and backend.core.
"""
