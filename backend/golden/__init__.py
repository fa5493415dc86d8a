"""Golden prompts (#24): the prompts file (prompts.py), the job that answers a checkpoint and the keeper
beside a run that starts it (job.py), and the answers compared (answers.py).
"""
