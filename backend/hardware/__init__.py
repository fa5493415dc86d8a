"""What this machine has (NVML through nvitop, CPU, RAM, bf16 readiness: machine.py) and the live
system monitor of the TUI (monitor.py).
"""
