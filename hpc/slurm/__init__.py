"""The Slurm commands over SSH: sbatch, squeue, sacct, scancel, sinfo, sacctmgr and the
tenant accounts, each taking a connection and returning typed records."""
