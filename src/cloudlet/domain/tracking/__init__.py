"""Experiment tracking's pure rules, in MLflow's terms."""
