"""Pure rules of jobs: the command job's spec and models, inputs, limits, kinds, status and run state
machines, how an attempt ends, why a job waits, the queue's scheduling, a run's data routes, and the parent
kinds: pipelines (DAG, bindings, parallel steps) and sweeps (space, sampling, early termination)."""
