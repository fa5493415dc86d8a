"""Merging a LoRA checkpoint (`swift export --merge_lora`) into a new folder (job.py) and the records of the
merged models of every run (merged.py).
"""
