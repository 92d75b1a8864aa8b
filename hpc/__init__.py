"""The SSH and Slurm library every app stands on: connection settings in, typed records out.

Plain Python: nothing here imports Django or an app, so it can be tested and benchmarked on its
own. Its layers, each importing only those below it:

- `types`, `arrays`, `errors`: the records and errors every scheduler shares;
- `ssh`, `pool`: pinned, deadline-bound SSH connections and their pool;
- `slurm`: the Slurm commands (sbatch, squeue, sacct, sinfo, sacctmgr, tenant accounts);
- `backends`: the schedulers behind one interface, Slurm over SSH and the demo's local one.
"""
