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


def update_rows(session: Session, model: type[Any], changes: list[tuple[object, dict[str, Any]]]) -> None:
    """``update_row`` for many rows: one executemany UPDATE per column set (a scheduling round
    writes its nodes together). Held objects stay coherent as with ``update_row``."""
    if len(changes) == 1:
        update_row(session, model, *changes[0])
        return
    table = cast(Table, model.__table__)
    by_columns: dict[frozenset[str], list[dict[str, Any]]] = {}
    held_objects = []
    for row_id, row_changes in changes:
        params = {f"v_{name}": value for name, value in row_changes.items()}
        by_columns.setdefault(frozenset(row_changes), []).append({"row_id": row_id, **params})
        held_objects.append((before_write(session, model, row_id), row_changes))
    connection = session.connection()
    for columns, params_list in by_columns.items():
        connection.execute(_update(table, columns), params_list)
    for held_object, row_changes in held_objects:
        after_write(held_object, row_changes)


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
