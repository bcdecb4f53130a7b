"""Plain-SQL row updates for hot paths, beside the ORM.

``update_row(session, Model, id, {"col": value})`` runs ``UPDATE … SET col = :v_col WHERE id =
:row_id`` on the session's connection, in its transaction. The statement is built once per
(table, column set): building one per call (``update(…).values(**changes)``) cost more than
executing it. Only for rows the session does not hold as objects (see ``held``): an object's
next flush would overwrite what a plain UPDATE wrote beside it.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from sqlalchemy import Table, Update, bindparam, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key


@functools.cache
def _update(table: Table, columns: frozenset[str]) -> Update:
    values = {name: bindparam(f"v_{name}", type_=table.c[name].type) for name in sorted(columns)}
    return update(table).where(table.c.id == bindparam("row_id")).values(values)


def update_row(session: Session, model: type[Any], row_id: object, changes: dict[str, Any]) -> None:
    table = cast(Table, model.__table__)
    params = {f"v_{name}": value for name, value in changes.items()}
    session.connection().execute(_update(table, frozenset(changes)), {"row_id": row_id, **params})


def held(session: Session, *rows: tuple[type[Any], object]) -> bool:
    """Whether the session holds any of these (model, primary key) rows as objects."""
    return any(identity_key(model, key) in session.identity_map for model, key in rows)
