"""What a result table declares: its grain, its order, and per column name, Arrow type,
unit and meaning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import pyarrow as pa

TEXT = pa.string()
CODES = pa.dictionary(pa.int8(), pa.string())  # text from a few values, stored as codes


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str  # "" for a name, a flag or a count of things other than tokens and bytes
    meaning: str
    defined: str = ""  # "page.md#anchor": the docs/ section that defines a derived value


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
