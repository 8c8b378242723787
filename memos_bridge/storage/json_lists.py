"""WHERE clauses on JSON-list columns (`*_json` holding a list of strings) that keep one statement shape.

"Does this row's list name one of these ids?" used to be written as one `LIKE '%"<id>"%'` per id joined
with OR. That has two faults:

* every number of ids is a different statement, so SQLAlchemy compiles and caches each shape anew; a
  learning chain asking with 1, 2, … 90 ids fills the statement cache with thousands of expression objects
  that stay alive (and that every full garbage collection then walks, stalling the whole process);
* `_` is a LIKE wildcard, so an id like `ep_1` also matched `epX1`.

Here the list is expanded into rows by the database's own JSON function and compared with `IN`, whose
values travel as one expanding parameter: one compiled statement for any number of ids, exact matches.
SQLite has `json_each`, PostgreSQL `json_array_elements_text` (the generic JSON type is `json` there);
both name the element column `value`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement


class _ListElements(FunctionElement[Any]):
    """The elements of a JSON list as a one-column table (`value`), named per dialect at compile time."""

    name = "json_list_elements"
    inherit_cache = True


@compiles(_ListElements)
def _sqlite_elements(element: _ListElements, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_each({compiler.process(element.clauses, **kw)})"


@compiles(_ListElements, "postgresql")
def _postgres_elements(element: _ListElements, compiler: SQLCompiler, **kw: Any) -> str:
    return f"json_array_elements_text({compiler.process(element.clauses, **kw)})"


def _holds(column: Any, wanted: list[str]) -> ColumnElement[bool]:
    elements = _ListElements(column).table_valued("value").alias("list_element")
    return exists(select(1).select_from(elements).where(elements.c.value.in_(wanted)))


def list_has_any(column: Any, values: Iterable[str]) -> ColumnElement[bool] | None:
    """`column` (a JSON list of strings) holds at least one of the non-empty `values`; None when there are
    none (the caller decides whether that means "no rows" or "no condition")."""
    wanted = [v for v in dict.fromkeys(values) if v]
    return _holds(column, wanted) if wanted else None


def list_has(column: Any, value: str) -> ColumnElement[bool]:
    """`column` (a JSON list of strings) holds `value`."""
    return _holds(column, [value])
