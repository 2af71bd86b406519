"""Collection across nodes on the cluster engines teams already run: SLURM (``slurm``: srun steps
inside the job, bundles through a shared folder), ssh and Kubernetes (``remote``: ``ssh`` or
``kubectl exec`` per host or pod, bundles streamed back as tars), all on one bounded parallel
runner (``runner``), then one merged analysis (``run``). See docs/cluster.md."""
