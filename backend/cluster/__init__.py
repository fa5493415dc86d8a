"""The clusters a run goes to (#40): what their schedulers say of it, read with their own commands.

Ground floor: plain subprocess calls and parsing, no workbench state, so the run's status (backend/runs),
the watchdog and the queue can all ask. `slurm_job` finds a run's SLURM job id; `sacct` asks SLURM's
accounting for its verdict on a job.
"""
