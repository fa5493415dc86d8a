"""Watchdog and alerts from outside the trainer (#15): detectors, alerts.jsonl, sinks, status line."""
