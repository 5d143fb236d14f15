"""Capacity at an SLO: the highest arrival rate at which a workload's SLO attainment stays at
or above a target, found on a modeled device's virtual clock (docs/capacity.md).

Each probe is the workload run at one arrival rate, a normal run folder; the probes of one
search share a folder, <output>/<name>/capacity/<date-time>-<profile>/, which also holds the
search's `capacity` table once it ends. The rate is trace.generate.rate for a generated
trace; for a trace file it is the file's mean arrival rate, set through trace.time_scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

from ..schema import TABLES
from ..schema.summary import CAPACITY_ROWS
from ..workload import Workload, WorkloadError, load_workload
from ..workload.schema import executor_spec
from .capacity_search import MAX_PROBES, MIN_RESOLUTION, Search, bounds, search
from .gil_protocol import planned

DEFAULT_ATTAINMENT = 0.9  # DistServe's: the highest rate that keeps 90 % of requests good
DEFAULT_RESOLUTION = 0.05  # the answer's bracket: high / low <= 1.05
GENERATED_RATE = "trace.generate.rate"
TIME_SCALE = "trace.time_scale"


class CapacityError(ValueError):
    """The workload cannot be searched for a capacity (bad input)."""


class Stopped(Exception):
    """A signal stopped the search: the probes run so far are written, no table."""


@dataclass(frozen=True)
class Knob:
    """How a probe sets the arrival rate: `key` and the workload's own rate (req/s)."""

    key: str
    rate: float
    time_scale: float  # the workload's own (a trace file's rate scales inversely with it)

    def override(self, rate: float) -> str:
        value = rate if self.key == GENERATED_RATE else self.time_scale * self.rate / rate
        return f"{self.key}={np.format_float_positional(value, trim='-')}"


@dataclass(frozen=True)
class Capacity:
    search: Search  # each probe's result is its row of the capacity table
    folder: Path  # the search's folder: its probes and its capacity table
    knob: Knob
    target: float
    resolution: float
    max_probes: int
    slo: Dict[str, float]
    profile: str  # the device profile the probes were modeled on

    @property
    def at_capacity(self) -> Optional[dict]:
        """The probe row at the highest rate found meeting the target; None if none met."""
        probe = self.search.at(self.search.low)
        return probe.result if probe else None

    def table(self) -> pd.DataFrame:
        rows = [dict(p.result, met=p.met, at_capacity=p.rate == self.search.low)
                for p in self.search.probes]
        return pd.DataFrame(rows, columns=list(TABLES["capacity"].names))


def check(workload: Workload) -> Dict[str, float]:
    """The workload's SLO; CapacityError naming the file and key where it cannot be searched."""
    v, where = workload.values, workload.path
    slo = {name: limit for name, limit in v["slo"].items() if limit is not None}
    if not slo:
        raise CapacityError(f"{where}: slo: capacity is the highest rate that meets an SLO: "
                            f"expected at least one of slo.ttft, slo.tpot, slo.e2e, got none")
    spec = executor_spec(v["device"])
    if not (spec and spec.modeled):
        raise CapacityError(f"{where}: device: capacity is searched on a modeled device's "
                            f"virtual clock (a probe on the real clock would last the trace's "
                            f"real time and measure this host too): expected "
                            f"modeled:<profile>, got {v['device']}")
    runs = len(planned(workload))
    if runs != 1:
        raise CapacityError(f"{where}: gil, repeats: a capacity probe is one run, but the "
                            f"workload plans {runs} (gil, gil_aa, gil_postprocess, repeats, "
                            f"gil_switch_interval_s): expected one")
    return slo


def knob(workload: Workload) -> Knob:
    """The rate a probe sets, and the workload's own; CapacityError for a trace file whose
    requests all arrive at once (no rate to scale)."""
    from ..traces.of_workload import TraceLoadError, load_workload_trace

    trace = workload.values["trace"]
    if trace["generate"] is not None:
        return Knob(GENERATED_RATE, float(trace["generate"]["rate"]), 1.0)
    try:
        arrivals = load_workload_trace(workload).df["arrival_s"].to_numpy(np.float64)
    except TraceLoadError as e:
        raise CapacityError(str(e)) from None
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) else 0.0
    if span <= 0:
        raise CapacityError(f"{workload.trace_file}: its {len(arrivals)} request(s) arrive at "
                            f"one instant: no arrival rate to scale")
    return Knob(TIME_SCALE, (len(arrivals) - 1) / span, float(trace["time_scale"]))


def _check_options(workload, rate_knob, target, resolution, lowest, highest, max_probes):
    """The search's bounds, (lowest, highest); CapacityError naming an option out of its
    bounds as the command line names it."""
    try:
        lowest, highest = bounds(rate_knob.rate, lowest, highest)
    except ValueError as e:
        raise CapacityError(f"{workload.path}: {e}") from None
    if not 0 < target <= 1:
        raise CapacityError(f"--attainment: expected a share of requests in (0, 1], "
                            f"got {target!r}")
    if not MIN_RESOLUTION <= resolution < np.inf:
        raise CapacityError(f"--resolution: expected a finite number >= {MIN_RESOLUTION:g} "
                            f"(the finest the search takes), got {resolution!r}")
    if not (isinstance(max_probes, int) and max_probes >= 1):
        raise CapacityError(f"--max-probes: expected an integer >= 1, got {max_probes!r}")
    return lowest, highest


def find(workload: Workload, overrides: Tuple[str, ...] = (),
         target: float = DEFAULT_ATTAINMENT, resolution: float = DEFAULT_RESOLUTION,
         lowest: Optional[float] = None, highest: Optional[float] = None,
         max_probes: int = MAX_PROBES, stop=None,
         on_probe: Callable[[dict], None] = lambda row: None) -> Capacity:
    """Search the workload (loaded with `overrides`, which every probe keeps) for its
    capacity, starting from its own rate, in `max_probes` probes at most; write the
    capacity table; return the answer. Stopped when `stop` is set during a probe (that
    probe's run is written whole). CapacityError, before anything is written, for an
    option out of its bounds, named as the command line names it."""
    from ..analysis.runs import read_run
    from ..io.interrupt import Stop
    from ..record.run_folder import new_run_dir
    from ..record.table_sink import write_table
    from .sweep import run_workload

    slo = check(workload)
    rate_knob = knob(workload)
    lowest, highest = _check_options(workload, rate_knob, target, resolution, lowest, highest,
                                     max_probes)
    stop = Stop() if stop is None else stop
    spec = executor_spec(workload.values["device"])
    assert spec is not None and spec.profile is not None  # check(): modeled:<profile>
    profile = spec.profile
    folder = new_run_dir(Path(workload.values["output"]) / workload.name / "capacity",
                         "".join(c if c.isalnum() or c in "-_." else "-" for c in profile))
    rows: List[dict] = []
    # each probe sets the rate knob itself: a --set of the same key is its start
    kept = tuple(o for o in overrides if o.partition("=")[0] != rate_knob.key)

    def probe(rate: float):
        try:
            probed = load_workload(workload.path, kept + (rate_knob.override(rate),))
        except WorkloadError as e:
            raise CapacityError(e) from None
        runs = run_workload(probed, None, stop, folder)
        if stop.is_set() or not runs:
            raise Stopped(f"{len(runs) + len(rows)} probe run(s) in {folder}, no capacity table")
        row = dict(_row(read_run(runs[0])), probe=len(rows), rate=rate)
        rows.append(row)
        met = bool(row["attainment"] >= target)  # NaN (nothing measured) misses
        on_probe(dict(row, met=met))
        return met, row

    found = search(probe, rate_knob.rate, resolution, lowest, highest, max_probes)
    capacity = Capacity(found, folder, rate_knob, target, resolution, max_probes, slo, profile)
    write_table(capacity.table(), folder, "capacity", workload.values["table_format"])
    return capacity


def _row(run) -> dict:
    """A probe's row of the capacity table, from its run (the probe's number and rate
    added by the search)."""
    row = {column: run.value(f"{metric}.{stat}")
           for column, (metric, stat) in CAPACITY_ROWS.items()}
    row["output_tokens_per_device"] /= run.devices
    return dict(run_id=run.name, **row)
