"""Versioned assets and the bytes behind them: data, models and environments (``assets``), components and
their code, code versions and snapshots, Docker build contexts, and the Blob service subset over the
datastores with its shared-access signatures."""
