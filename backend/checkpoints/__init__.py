"""The checkpoints of a run as a user meets them (`workbench checkpoints`, the scoreboard panel): the
scoreboard (scoreboard.py, its text in board_text.py, the save events it reads in saved_events.py), each
folder's stats (stats.py), pins out of rotation's reach (pins.py) and which model a job loads (targets.py).
Columns of other features (golden prompts, swift eval) are registered with the scoreboard at start-up.
"""
