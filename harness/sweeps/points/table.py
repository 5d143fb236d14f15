"""The sweep's table: one row per point, in the grid's order (harness/schema/tables.py
declares its columns), its `pareto` column from harness/analysis/pareto.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

import pandas as pd

from ...analysis import sweep_state
from ...analysis.pareto import front
from ...schema import TABLES
from .answer import ANSWER, empty_answer
from .cost import costs
from .point import Point, Refused

TABLE = "sweep"


def row(point, result: Optional[Dict], folder: Path, skipped: bool = False) -> Dict[str, Any]:
    """A point's row: a Refused point's, or a Point's with its result (None: not run, as
    when the sweep was stopped)."""
    common = dict(axes=json.dumps(point.axes, default=str))
    if isinstance(point, Refused):
        return dict(common, point="", device="", front="", status="refused",
                    reason=point.reason, skipped=False, folder="", **empty_answer())
    assert isinstance(point, Point)
    result = result or dict(empty_answer(), status="failed", reason=sweep_state.NOT_RUN)
    answer = {k: result.get(k) for k in ANSWER}
    return dict(common, point=point.key, device=point.device, front=point.front,
                status=result["status"], reason=result["reason"], skipped=skipped,
                folder=str(point.folder.relative_to(folder)), **answer)


def table(rows: List[Dict[str, Any]], prices: Optional[Dict[str, float]] = None) \
        -> pd.DataFrame:
    """The rows with their cost columns (cost.py: per kW, per dollar-hour at `prices`, the
    sweep file's, by device) and their `pareto` column (a point without an answer is on
    no front: sweep_state), in the declared columns and types."""
    rows = [dict(r, **costs(r, prices or {})) for r in rows]
    pairs = [(_number(r["output_tokens_per_device"]), _number(r["tokens_per_s_per_user"]))
             for r in rows]
    answered = [sweep_state.of(r) == sweep_state.ANSWER for r in rows]
    on_front = front([r["front"] for r in rows], pairs, answered)
    df = pd.DataFrame([dict(r, pareto=p) for r, p in zip(rows, on_front)],
                      columns=list(TABLES[TABLE].names))
    df["concurrency"] = df["concurrency"].astype("Int64")
    return df


def _number(v) -> float:
    return math.nan if v is None else float(v)
