"""Why did it stop moving (#39): the hang report by rank (stacks grouped, the lagging rank named), the NCCL
watchdog's own log lines lined up, PyTorch's flight recorder for NCCL runs, and the multi-node preflight."""
