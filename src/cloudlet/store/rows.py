"""Plain-SQL row updates for hot paths, beside the ORM.

``update_row(session, Model, id, {"col": value})`` runs ``UPDATE … SET col = :v_col WHERE id =
:row_id`` on the session's connection, in its transaction. The statement is built once per
(table, column set): building one per call (``update(…).values(**changes)``) cost more than
executing it.

A row the session also holds as an object stays coherent with it (``before_write`` /
``after_write``): the object's pending changes are flushed before the UPDATE (they came first),
and the object then takes the written values as its loaded state, which is what expiring and
refreshing it would read back, without the query. Its next flush therefore cannot overwrite what
the UPDATE wrote. (Attribute names are the column names in ``store/schema.py``.)
"""

from __future__ import annotations

import functools
from typing import Any, cast

from sqlalchemy import Table, Update, bindparam, inspect, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key


@functools.cache
def _update(table: Table, columns: frozenset[str]) -> Update:
    values = {name: bindparam(f"v_{name}", type_=table.c[name].type) for name in sorted(columns)}
    return update(table).where(table.c.id == bindparam("row_id")).values(values)


def update_row(session: Session, model: type[Any], row_id: object, changes: dict[str, Any]) -> None:
    table = cast(Table, model.__table__)
    params = {f"v_{name}": value for name, value in changes.items()}
    held_object = before_write(session, model, row_id)
    session.connection().execute(_update(table, frozenset(changes)), {"row_id": row_id, **params})
    after_write(held_object, changes)


def before_write(session: Session, model: type[Any], row_id: object) -> Any | None:
    """The object SESSION holds for the row (None when it holds none), its pending changes
    flushed so that a plain UPDATE of the row comes after them, as it did in the code."""
    held_object = session.identity_map.get(identity_key(model, row_id))
    if held_object is not None and inspect(held_object).modified:
        session.flush()
    return held_object


def after_write(held_object: Any | None, written: dict[str, Any]) -> None:
    """HELD_OBJECT (from ``before_write``) takes WRITTEN (column -> value) as loaded state."""
    if held_object is not None:
        for name, value in written.items():
            set_committed_value(held_object, name, value)


def held(session: Session, *rows: tuple[type[Any], object]) -> bool:
    """Whether the session holds any of these (model, primary key) rows as objects."""
    return any(identity_key(model, key) in session.identity_map for model, key in rows)
