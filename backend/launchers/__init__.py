"""Launches for other engines: an sbatch script for SLURM, a script for plain torchrun.

Both start exactly the training that `workbench run` would start, with the same swift
arguments and the same callback writing events, so the run can be watched the same way.
"""
