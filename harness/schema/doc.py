"""docs/tables.md, rendered from the declaration (`python -m harness.schema`)."""

from __future__ import annotations

import textwrap

import pyarrow as pa

from .column import Column, Table
from .manifest import MANIFEST
from .tables import LABELS, TABLES

INTRO = """\
# Result tables

<!-- Generated from harness/schema/tables.py by `python -m harness.schema > docs/tables.md`;
edit the declaration, not this file (tests/test_tables_schema.py checks they agree). -->

A run directory, `results/<workload>/<run_id>/`, holds `manifest.json`, `result.json` (the
summary in vLLM's benchmark's field names: [metrics.md](metrics.md#in-vllms-words)) and
five tables in the workload's `table_format`: Parquet (`steps.parquet`, ...) or CSV with
the same columns. Each column is declared once, in `harness/schema/tables.py`, with its Arrow type;
every writer casts its rows to the declaration, so a table reads back with the same dtypes
whichever code path wrote it (`dictionary` columns read into pandas as `category`). A
column derived from others (latencies, FLOPs, device readings) links to where
[metrics.md](metrics.md) or [telemetry.md](telemetry.md) defines it; this page does not
define it again. Times in `s` are on the run's clock, wall or virtual, zero at the
replay's start; the device table's `t_s` is on the wall clock even in a virtual-clock run.
"""


def markdown() -> str:
    parts = [INTRO, _labels()] + [_table(t) for t in TABLES.values()] + [_manifest()]
    return "\n".join(parts)


def _manifest() -> str:
    lines = ["| key | JSON | written | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{k.name}` | {' or '.join(k.kinds)} | {k.when or 'always'} | {k.meaning} |"
              for k in MANIFEST]
    return ("## manifest.json\n\n"
            + _paragraph("A run folder's `manifest.json` says what ran, where, and how it "
                         "ended; its keys are declared in `harness/schema/manifest.py`. "
                         "`executor_kind` and `profile` are the executor's two parts: "
                         "readers take them from there, not from `executor`'s text. Code "
                         "reads a manifest through its typed view, generated from the "
                         "declaration (`harness/schema/manifest_view.py`): an attribute "
                         "per key, None where an older run's manifest lacks it.")
            + "\n".join(lines) + "\n")


def _labels() -> str:
    return ("## Run labels\n\n"
            + _paragraph("Every table of a run ends with the run's labels, one value for the "
                         "whole run (the null-engine calibration's scratch tables have none):")
            + _rows(LABELS.values()))


def _table(table: Table) -> str:
    text = f"One row per {table.grain}. Order: {table.order}. {table.notes}"
    return f"## {table.name}\n\n" + _paragraph(text) + _rows(table.columns)


def _paragraph(text: str) -> str:
    return textwrap.fill(text.strip(), width=90, break_on_hyphens=False) + "\n\n"


def _rows(columns) -> str:
    lines = ["| column | type | unit | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{c.name}` | {_type(c.type)} | {c.unit} | {_meaning(c)} |" for c in columns]
    return "\n".join(lines) + "\n"


def _type(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return f"dictionary<{t.index_type}, {t.value_type}>"
    return str(t)


def _meaning(c: Column) -> str:
    text = f"{c.meaning}; codes: {_values(c)}" if c.values else c.meaning
    return f"{text} ([{c.defined.split('#')[0]}]({c.defined}))" if c.defined else text


def _values(c: Column) -> str:
    """'0 `decode`, 1 `prompt`': each code with its one name, in code order."""
    return ", ".join(f"{code} `{name}`" for code, name in sorted(c.values))
