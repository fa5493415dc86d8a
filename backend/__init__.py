"""finetune-workbench backend: plain Python, no Textual, no torch at import time."""
