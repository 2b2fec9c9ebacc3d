"""The cluster layer: executors over submitit, job records, code snapshots, packing of runs into
array tasks, and job state from the scheduler. The shell scripts beside this package start and
stop the single-node SLURM cluster of the tests; ``profiles/`` holds cluster profiles."""
