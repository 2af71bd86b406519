"""Collection across nodes on the cluster engines teams already run: SLURM (``slurm``: srun steps
inside the job, bundles through a shared folder, one merged analysis) and the commands to do the
same with ``kubectl`` or ssh/pdsh (``commands``), which hangscope prints rather than runs."""
