"""`swift eval` of a checkpoint and its base (#24): the job (job.py), its worker (worker.py) and the
results the scoreboard shows (results.py).
"""
