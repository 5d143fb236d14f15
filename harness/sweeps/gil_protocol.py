"""The order of a GIL A/B sweep, and its `gil` table.

The arms run interleaved: one block per repeat, each block holding every arm once in an
order shuffled for that block by a seeded generator, so a drift of the host during the
sweep falls on every arm alike (docs/gil.md). With several switch intervals the whole set
of blocks runs once per interval, in the order given. The `gil` table has one row per run
of the sweep, with the primary metrics read back from each run's summary.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence, Tuple

import numpy as np
import pandas as pd

from ..run.planned_run import PlannedRun
from ..schema.summary import GIL_PRIMARY

# (summary metric, stat) -> gil table column
PRIMARY = dict(zip(GIL_PRIMARY, ("sched_call_p50_us", "sched_call_p99_us", "steps_per_s",
                                 "enqueue_drift_p99_s", "delivery_delay_p99_s",
                                 "frontend_cpu_share_pct")))


def planned(workload) -> List[PlannedRun]:
    """Every run of the workload's sweep, in the order they run."""
    return plan(workload.arms, workload.repeats, workload.switch_intervals,
                workload.seeds.protocol)


def plan(arms: Sequence[str], repeats: int, switch_intervals: Iterable[float],
         seed: int) -> List[PlannedRun]:
    """Every run of the sweep, in the order they run; the same for the same seed."""
    rng = np.random.default_rng(seed)
    runs = []
    for interval in switch_intervals:
        for block in range(repeats):
            order = rng.permutation(len(arms)) if len(arms) > 1 else [0]
            runs += [PlannedRun(arms[i], block, position, float(interval))
                     for position, i in enumerate(order)]
    return runs


def table(rows: Iterable[Tuple[str, PlannedRun, dict, List[dict]]]) -> pd.DataFrame:
    """The gil table from (run_id, planned run, its host_share, its summary rows)."""
    out: List[Dict[str, object]] = []
    for run_id, run, share, summary in rows:
        values = {(r["metric"], r["stat"]): r["value"] for r in summary}
        out.append(dict(run_id=run_id, arm=run.arm, block=run.block, order=run.order,
                        switch_interval_s=run.switch_interval_s,
                        other_cpu_pct=share["other_cpu_pct"], steal_pct=share["steal_pct"],
                        contaminated=share["contaminated"],
                        **{column: float(values.get(key, np.nan))
                           for key, column in PRIMARY.items()}))
    return pd.DataFrame(out)
