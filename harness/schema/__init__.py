"""The result tables' columns, declared once (harness/schema/tables.py): name, Arrow type,
unit, meaning and a coded column's values.

Everything else derives from the declaration: the Arrow schema every sink casts its chunks
to (harness/record/table_sink.py), the codes the recorder writes and the values the
analysis reads (harness/schema/values.py), docs/tables.md (`python -m harness.schema >
docs/tables.md`; a test checks the file is current), and the tests that hold the
recorder's C++ columns and the written files to it.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from .column import Column, Table
from .tables import LABELS, SWEEP_TABLES, TABLES

__all__ = ["Column", "Table", "LABELS", "SWEEP_TABLES", "TABLES", "arrow_schema"]


def arrow_schema(table: str, labels: Sequence[str] = ()) -> pa.Schema:
    """The table's columns, then the given run labels (some of LABELS, in LABELS' order)."""
    if table not in TABLES:
        raise KeyError(f"no declared table {table!r}: the tables are {', '.join(TABLES)}")
    unknown = [name for name in labels if name not in LABELS]
    if unknown:
        raise KeyError(f"{table}: {unknown} are not run labels ({', '.join(LABELS)})")
    columns = TABLES[table].columns + tuple(c for name, c in LABELS.items() if name in labels)
    return pa.schema([pa.field(c.name, c.type) for c in columns])
