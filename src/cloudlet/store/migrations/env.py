"""Alembic environment: the server passes its own connection in ``config.attributes``."""

from __future__ import annotations

from alembic import context

from cloudlet.store.schema import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - offline use from the alembic command line
    raise RuntimeError("run migrations through cloudlet.store.db.migrate()")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
