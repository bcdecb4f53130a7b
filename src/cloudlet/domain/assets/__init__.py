"""Pure rules of assets: data, model and environment versions (``assets``) and how they are referred to,
components, environments with their conda files and build contexts, and the limits on an upload."""
