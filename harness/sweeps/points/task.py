"""A point run: the one function a worker runs, whatever runs the workers (this host's
process pool, or a Ray cluster's tasks). It takes the resolved point and returns its row, and touches
nothing but the point's own folder."""

from __future__ import annotations

import math
from typing import Dict

from ...record.run import Run
from ...workload import load_workload
from . import marker
from .answer import SUMMARY_VALUES, empty_answer
from .point import Point


def run_point(point: Point) -> Dict:
    """The point run (or searched for its capacity) into its folder, its row returned:
    status done with the answer, or failed with the reason. A done point's row is written
    to its marker last; a failed point leaves none, and runs again on resume."""
    try:
        marker.fresh(point.folder)
        workload = load_workload(point.workload, point.overrides)
        answer = _capacity(point, workload) if point.mode == "capacity" else _run(workload)
    except Exception as e:  # noqa: BLE001 - any failure is the point's, said in its row
        return dict(empty_answer(), status="failed", reason=f"{type(e).__name__}: {e}")
    row = dict(answer, status="done", reason="")
    marker.write(point.folder, row)
    return row


def _run(workload) -> Dict:
    from ..sweep import run_workload

    (run,) = run_workload(workload)  # point.refusal(): one planned run
    return dict(_measured(run), outcome="run", rate=run.value("throughput.requests"),
                concurrency=None)


def _capacity(point: Point, workload) -> Dict:
    from ..capacity import find

    capacity = find(workload, point.overrides)
    at = capacity.at_capacity
    if at is None:  # no rate met the target: no answer, the search's folder
        return dict(empty_answer(), run_dir=str(capacity.folder), outcome=capacity.outcome)
    measured = _measured(Run.read(capacity.folder / at["run_id"]))
    return dict(measured, outcome=capacity.outcome, rate=at["rate"],
                concurrency=at["concurrency"])


def _measured(run) -> Dict:
    """The answer's summary values of one complete run (a Run: harness/record/run.py), per
    device and per user too, and its power per device (power.py)."""
    from .power import run_power

    if run.state != "complete":  # stopped by a signal, or failed: not an answer
        raise RuntimeError(f"the run {run.path} is {run.state}")
    values = {column: run.value(name) for column, name in SUMMARY_VALUES.items()}
    tpot = values["tpot_p50_s"]
    power = run_power(run)
    return dict(values, run_dir=str(run.path), power_w=power.watts,
                power_source=power.source, busy=power.busy,
                output_tokens_per_device=values["output_tokens_per_s"] / run.devices,
                tokens_per_s_per_user=1 / tpot if tpot > 0 else math.nan)
