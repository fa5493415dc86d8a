"""Batch inference over a dataset into a results jsonl (prompt / reference / answer): the job kind that
golden prompts and the parity check of an export run (batch.py; its worker half imports swift, in its own
process only)."""
