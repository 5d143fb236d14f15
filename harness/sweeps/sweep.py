"""Every run a workload plans, in the GIL protocol's interleaved order
(harness/sweeps/gil_protocol.py), each at its switch interval, and their `gil` table.

The first SIGINT or SIGTERM stops them: the run in progress is written, marked
incomplete, and no later run starts (harness/io/interrupt.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

from ..io.interrupt import Stop, signals_stop
from ..record.run import Run
from ..record.table_sink import write_table
from ..run.end_to_end import run_once
from ..workload import Workload
from ..workload.trace import load_workload_trace
from . import gil_protocol

NO_SHARE = dict(other_cpu_pct=np.nan, steal_pct=np.nan, contaminated=False)  # not measured


def run_workload(workload: Workload, progress: Optional[Callable] = None,
                 stop: Optional[Stop] = None, into: Optional[Path] = None,
                 ran: Optional[Callable] = None) -> List[Run]:
    """Every run the workload plans; returns the runs as written (harness/record/run.py),
    in `into` (default <output>/<name>/; a capacity search keeps its probes together).
    `progress` hears each run's requests done, `ran` each run written (its number from 1,
    the runs planned, the PlannedRun). More than one planned run writes the `gil` table
    under <output>/<name>/sweeps/<first run id>/ unless stopped. The first SIGINT or
    SIGTERM (or a KeyboardInterrupt from `progress`) stops the runs, and `stop.signum`
    says which signal it was."""
    trace = load_workload_trace(workload)
    stop = Stop() if stop is None else stop
    planned = gil_protocol.planned(workload)
    out: List[Run] = []
    rows = []
    with signals_stop(stop):
        for run in planned:
            if stop.is_set():  # stopped: no later run starts
                break
            previous = sys.getswitchinterval()
            sys.setswitchinterval(run.switch_interval_s)
            try:
                written = run_once(workload, trace, run, progress, stop, into)
            finally:
                sys.setswitchinterval(previous)
            if written is not None:  # None: stopped during its calibration
                out.append(written)
                rows.append((out[-1].name, run, out[-1].manifest.host_share or NO_SHARE,
                             out[-1].summary.to_dict("records")))
                if ran is not None:
                    ran(len(out), len(planned), run)
    if len(planned) > 1 and rows and not stop.is_set():  # stopped runs' blocks are partial
        folder = Path(workload.output) / workload.name / "sweeps" / out[0].name
        folder.mkdir(parents=True, exist_ok=True)
        write_table(gil_protocol.table(rows), folder, "gil", workload.table_format)
    return out
