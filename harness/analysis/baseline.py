"""A stored baseline: a folder of trimmed run folders (results/baselines/<name>/), what
`steptrace gate` reads as BASELINE and `steptrace gate --update` writes.

A trimmed run keeps its manifest and summary and, for a modeled run, the steps, batches
and requests tables without the columns that time the host: what the gate compares, a
few hundred KB for a small workload. The folder is replaced whole or not at all.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import List, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..commands.common import BadInput
from .exact import TABLES, compared_columns
from .runs import Run


def store(runs: Sequence[Run], dest: Path) -> List[Path]:
    """Replace the baseline at `dest` with trimmed copies of `runs` (complete ones only);
    the run folders written. A failure leaves the previous baseline as it was."""
    for run in runs:
        if not run.complete:
            raise BadInput(f"{run.path}: {run.state}, not complete: a baseline holds complete "
                           f"runs only")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{secrets.token_hex(4)}.tmp"
    try:
        tmp.mkdir()
        for run in runs:
            _trimmed(run, tmp / run.name)
        old = None
        if dest.exists():
            old = dest.parent / f".{dest.name}.{secrets.token_hex(4)}.old"
            os.replace(dest, old)
        os.replace(tmp, dest)
        if old is not None:
            shutil.rmtree(old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [dest / run.name for run in runs]


def _trimmed(run: Run, out: Path) -> None:
    out.mkdir()
    shutil.copyfile(run.path / "manifest.json", out / "manifest.json")
    for name in ("summary", *(TABLES if run.modeled else ())):
        columns = None if name == "summary" else compared_columns(run, name)
        table = pa.Table.from_pandas(run.table(name, columns), preserve_index=False)
        pq.write_table(table, out / f"{name}.parquet", compression="zstd")
