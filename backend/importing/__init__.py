"""From someone else's launch to a profile: swift's flags (swift_flags.py), launcher settings of torchrun,
accelerate and environment prefixes (launcher_flags.py), and the shell script reader (shell_script.py).
"""
