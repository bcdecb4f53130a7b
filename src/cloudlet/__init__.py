"""cloudlet: self-hosted compute for machine-learning teams."""

__version__ = "0.1.0"
