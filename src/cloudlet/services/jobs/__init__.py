"""Jobs from submission to their end: submitting and reading them (``jobs``), searching them, why a queued
one waits, placing them on nodes (dispatch, run specs, prepared specs), exits, status, cancelling, outputs,
a run's data over HTTP, and the parent jobs (pipelines, sweeps) that run other jobs, with their children."""
