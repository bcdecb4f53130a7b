"""Online and batch endpoints and their deployments: their writes, invocations, request metrics,
pipeline-component batch deployments, the code a batch job runs (the user's snapshot with cloudlet's batch
driver) and the MLflow models deployed without a scoring script."""
