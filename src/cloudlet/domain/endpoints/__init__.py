"""Pure rules of online and batch endpoints: their documents, online autoscale, batch scoring and
pipeline-component batch deployments, and MLflow models deployed without a scoring script."""
