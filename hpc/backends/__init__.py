"""The schedulers the platform runs jobs on, behind one interface (`Backend`): Slurm over SSH
for the owners' clusters, and `local` (process groups on this machine) for the demo. Plain
Python with no Django: the services hand it specs and get typed records back."""
