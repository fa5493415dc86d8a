"""Tracked jobs of a run, under <run>/jobs/: the job folder (job.py), its part in the one supervisor
(supervise.py: its command and the finishing step its kind registered) and the batch inference worker
(batch_infer.py) that golden prompts and parity run.

Nothing here imports torch or swift at module level except the worker half of batch_infer.py, which
only ever runs in its own subprocess.
"""
