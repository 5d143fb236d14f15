"""What a result table declares: its grain, its order, and per column name, Arrow type,
unit, meaning and, for a coded column, its values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import pyarrow as pa

TEXT = pa.string()
CODES = pa.dictionary(pa.int8(), pa.string())  # text from a few values, stored as codes
I32, I64, F64, BOOL = pa.int32(), pa.int64(), pa.float64(), pa.bool_()


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str  # "" for a name, a flag or a count of things other than tokens and bytes
    meaning: str
    defined: str = ""  # "page.md#anchor": the docs/ section that defines a derived value
    # a coded column's (code, name) pairs, in the order its names are listed
    values: Tuple[Tuple[int, str], ...] = ()
    # the value a row has where the column's thing never happened (a request never handed
    # off has no decode instance: -1); None where the column declares none
    missing: Optional[float] = None

    @property
    def value_names(self) -> Tuple[str, ...]:
        return tuple(name for _, name in self.values)

    def code(self, name: str) -> int:
        for code, value in self.values:
            if value == name:
                return code
        raise KeyError(f"{self.name} has no value {name!r}: {', '.join(self.value_names)}")

    def names_by_code(self) -> Tuple[str, ...]:
        """The names indexed by code (each code one name)."""
        pairs = sorted(self.values)
        if [code for code, _ in pairs] != list(range(len(pairs))):
            raise ValueError(f"{self.name}: codes {pairs} are not 0, 1, ... with one name each")
        return tuple(name for _, name in pairs)


@dataclass(frozen=True)
class Table:
    name: str
    grain: str  # what one row is
    order: str  # how the rows are ordered
    columns: Tuple[Column, ...]
    notes: str = ""  # what holds for several columns

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"the {self.name} table has no column {name!r}")


def col(name: str, type_: pa.DataType, unit: str, meaning: str, defined: str = "",
        values=(), missing: Optional[float] = None) -> Column:
    """A column declared as the tables declare theirs: a coded column's values in code
    order."""
    return Column(name, type_, unit, meaning, defined, tuple(enumerate(values)), missing)
