"""Experiment tracking, MLflow's REST API served from cloudlet's store: runs (``tracking``), experiments,
logged models, reads, run writes and jobs' tracking tokens."""
