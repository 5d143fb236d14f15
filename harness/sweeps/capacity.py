"""Capacity at an SLO: the highest arrival rate at which a workload's SLO attainment stays at
or above a target, found on a modeled device's virtual clock (docs/capacity.md); for a
closed loop (load.mode: concurrency), the highest number of requests in flight.

Each probe is the workload run at one arrival rate, a normal run folder; the probes of one
search share a folder, <output>/<name>/capacity/<date-time>-<profile>/, which also holds the
search's `capacity` table and its answer (RESULT_FILE: `steptrace capacity --json`'s
document, what `steptrace show` prints again) once it ends. The rate is trace.generate.rate for a generated
trace; for a trace file it is the file's mean arrival rate, set through trace.time_scale.
In a closed loop the knob is load.concurrency, searched over whole numbers, and the rate is
an outcome: each probe's achieved request rate (its summary's throughput requests).
The answer is then checked for the trace's length (the length check): a trace too short to
build the queue that saturation means, or to fill the decode pool, finds a "capacity" that a
longer one misses. The run at the answer must reach its steady state (the deciding pool's
running sequences at their plateau before the last arrival), and the answer is re-run on a
trace twice as long.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import pandas as pd

from ..record.run import Run
from ..schema import TABLES
from ..schema.summary import CAPACITY_ROWS
from ..schema.values import DEFAULT_ATTAINMENT
from ..workload import Workload, WorkloadError, load_workload
from ..workload.schema import executor_spec
from .capacity_search import (
    MAX_PROBES,
    MIN_RESOLUTION,
    Search,
    bounds,
    integer_bounds,
    search,
    search_integers,
)
from .gil_protocol import planned

if TYPE_CHECKING:
    from ..analysis.steady_state import SteadyState

DEFAULT_RESOLUTION = 0.05  # the answer's bracket: high / low <= 1.05
GENERATED_RATE = "trace.generate.rate"
GENERATED_REQUESTS = "trace.generate.requests"
TIME_SCALE = "trace.time_scale"
FILE_LIMIT = "trace.limit"
CONCURRENCY = "load.concurrency"
RESULT_FILE = "capacity.json"  # the search's answer, its --json document, in its folder


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
    requests: int  # in the workload's trace

    def override(self, rate: float) -> str:
        value = rate if self.key == GENERATED_RATE else self.time_scale * self.rate / rate
        return f"{self.key}={np.format_float_positional(value, trim='-')}"


@dataclass(frozen=True)
class ConcurrencyKnob:
    """How a probe sets a closed loop's requests in flight: load.concurrency, from the
    workload's own."""

    concurrency: int
    requests: int  # in the workload's trace
    key: str = CONCURRENCY

    def override(self, concurrency: float) -> str:
        return f"{self.key}={int(concurrency)}"


AnyKnob = Union[Knob, ConcurrencyKnob]


@dataclass(frozen=True)
class Options:
    """How a search runs: the command line's options (docs/capacity.md)."""

    target: float = DEFAULT_ATTAINMENT
    resolution: float = DEFAULT_RESOLUTION
    # req/s; None: the workload's rate / 2**STEPS and * 2**STEPS. In a concurrency search
    # requests in flight; None: 1 and the larger of the workload's and the trace's requests
    lowest: Optional[float] = None
    highest: Optional[float] = None
    max_probes: int = MAX_PROBES
    length_check: bool = True  # re-check the answer on a trace twice as long


@dataclass(frozen=True)
class LengthCheck:
    """The answer checked for the trace's length (docs/capacity.md, "Trace length"): the run
    at the answer's steady state, and the answer less its resolution re-run on a trace twice
    as long. `status`: passed (the run at the answer reached its steady state and the
    doubled trace meets the target), failed (the run reached no steady state, `reason` why,
    or the doubled trace misses the target: the answer depends on the trace's length),
    unchecked (it reached its steady state, but the trace cannot be doubled: `reason`) or
    off (--no-length-check: neither is asked)."""

    status: str
    requests: int  # in the doubled trace
    setting: str  # the --set that doubles it
    row: Optional[dict] = None  # the check's probe row, when it ran
    reason: str = ""
    steady: Optional[SteadyState] = None  # the run at the answer's; None when off


@dataclass(frozen=True)
class Capacity:
    search: Search  # each probe's result is its row of the capacity table
    folder: Path  # the search's folder: its probes and its capacity table
    knob: AnyKnob
    options: Options
    slo: Dict[str, float]
    profile: str  # the device profile the probes were modeled on
    length_check: Optional[LengthCheck] = None  # None: no answer to check
    workload: Optional[Workload] = None  # the workload searched

    @property
    def closed_loop(self) -> bool:
        """A concurrency search: the knob is the requests in flight, the rate an outcome."""
        return isinstance(self.knob, ConcurrencyKnob)

    @property
    def outcome(self) -> str:
        """capacity (bracketed), at_least (every rate met, up to the highest), none (even the
        lowest missed), probe_limit (out of probes) or trace_too_short (the length check
        failed)."""
        found, check = self.search, self.length_check
        return "probe_limit" if found.out_of_probes else \
            "trace_too_short" if check is not None and check.status == "failed" else \
            "capacity" if found.found else "at_least" if found.low is not None else "none"

    @property
    def at_capacity(self) -> Optional[dict]:
        """The probe row at the highest rate (or concurrency) found meeting the target; None
        if none met."""
        probe = self.search.at(self.search.low)
        return probe.result if probe else None

    def table(self) -> pd.DataFrame:
        rows = [dict(p.result, met=p.met, at_capacity=p.rate == self.search.low)
                for p in self.search.probes]
        check = self.length_check
        if check is not None and check.row is not None:
            met = bool(check.row["attainment"] >= self.options.target)  # NaN misses
            rows.append(dict(check.row, met=met, at_capacity=False))
        return pd.DataFrame(rows, columns=list(TABLES["capacity"].names))

    @property
    def document(self) -> dict:
        """The search and its answer as `steptrace capacity --json` prints it (and
        RESULT_FILE holds): the workload, the SLO and options, the outcome, the answer, the
        length check and every probe."""
        found, at, workload = self.search, self.at_capacity, self.workload
        assert workload is not None  # find() gives its answer the workload
        if isinstance(self.knob, ConcurrencyKnob):  # the rate is then an outcome
            knob = dict(load_mode="concurrency", workload_concurrency=self.knob.concurrency)
        else:
            knob = dict(load_mode="trace", rate_key=self.knob.key, workload_rate=self.knob.rate)
        return dict(
            workload=str(workload.path), name=workload.name, device=self.profile,
            modeled=True, clock="virtual", slo=self.slo, attainment_target=self.options.target,
            resolution=self.options.resolution, max_probes=self.options.max_probes,
            **knob, requests=self.knob.requests, outcome=self.outcome,
            capacity=None if at is None else dict(
                concurrency=at["concurrency"], rate=at["rate"], missed_at=found.high,
                attainment=at["attainment"],
                goodput=at["goodput"], output_tokens_per_device=at["output_tokens_per_device"],
                tpot_p50_s=at["tpot_p50_s"], tpot_p99_s=at["tpot_p99_s"],
                run_dir=str(self.folder / at["run_id"])),
            length_check=self._length_check_document(),
            folder=str(self.folder),
            table=str(self.folder / f"capacity.{workload.table_format}"),
            probes=self.table().to_dict("records"))

    def _length_check_document(self) -> Optional[dict]:
        """The document's length_check: the answer re-checked on a trace twice as long;
        None when the search found no answer to check."""
        check = self.length_check
        if check is None:
            return None
        row, steady = check.row or {}, check.steady
        return dict(status=check.status, requests=check.requests, setting=check.setting,
                    concurrency=row.get("concurrency"), rate=row.get("rate"),
                    attainment=row.get("attainment"),
                    goodput=row.get("goodput"), reason=check.reason or None,
                    run_dir=str(self.folder / row["run_id"]) if row else None,
                    steady_state=None if steady is None else dict(
                        found=steady.found, reason=steady.reason or None,
                        start_s=steady.start_s, end_s=steady.end_s))


def check(workload: Workload) -> Dict[str, float]:
    """The workload's SLO; CapacityError naming the file and key where it cannot be searched."""
    where = workload.path
    slo = {name: limit for name, limit in asdict(workload.slo).items() if limit is not None}
    if not slo:
        raise CapacityError(f"{where}: slo: capacity is the highest rate that meets an SLO: "
                            f"expected at least one of slo.ttft, slo.tpot, slo.e2e, got none")
    spec = executor_spec(workload.device)
    if not (spec and spec.modeled):
        raise CapacityError(f"{where}: device: capacity is searched on a modeled device's "
                            f"virtual clock (a probe on the real clock would last the trace's "
                            f"real time and measure this host too): expected "
                            f"modeled:<profile>, got {workload.device}")
    if workload.load.mode == "offline":
        raise CapacityError(f"{where}: load.mode: capacity searches the arrival rate of an "
                            f"open loop, and load.mode offline has no rate: expected trace (or "
                            f"concurrency: a closed loop, searched over its requests in flight; "
                            f"offline releases every request at 0 and has no knob)")
    runs = len(planned(workload))
    if runs != 1:
        raise CapacityError(f"{where}: gil, repeats: a capacity probe is one run, but the "
                            f"workload plans {runs} (gil, gil_aa, gil_postprocess, repeats, "
                            f"gil_switch_interval_s): expected one")
    return slo


def knob(workload: Workload) -> AnyKnob:
    """The rate a probe sets, and the workload's own (in a closed loop, the requests in
    flight); CapacityError for a trace file whose requests all arrive at once (no rate to
    scale)."""
    from ..workload.trace import TraceLoadError, load_workload_trace

    generate = workload.trace.generate
    if workload.load.mode == "concurrency":  # the trace's times are not used
        if generate is not None:
            requests = int(generate.requests)
        else:
            try:
                requests = len(load_workload_trace(workload).df)
            except TraceLoadError as e:
                raise CapacityError(str(e)) from None
        concurrency = workload.load.concurrency
        assert concurrency is not None  # checks.load_mode: load.mode concurrency needs it
        return ConcurrencyKnob(concurrency, requests)
    if generate is not None:
        return Knob(GENERATED_RATE, float(generate.rate), 1.0, int(generate.requests))
    try:
        arrivals = load_workload_trace(workload).df["arrival_s"].to_numpy(np.float64)
    except TraceLoadError as e:
        raise CapacityError(str(e)) from None
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) else 0.0
    if span <= 0:
        raise CapacityError(f"{workload.trace_file}: its {len(arrivals)} request(s) arrive at "
                            f"one instant: no arrival rate to scale")
    return Knob(TIME_SCALE, (len(arrivals) - 1) / span, float(workload.trace.time_scale),
                len(arrivals))


def _check_options(workload: Workload, rate_knob: AnyKnob, options: Options) -> Options:
    """The options with the search's bounds filled in; CapacityError naming an option out of
    its bounds as the command line names it."""
    lowest: float
    highest: float
    try:
        if isinstance(rate_knob, ConcurrencyKnob):  # beyond the trace's requests, all at 0
            start = rate_knob.concurrency
            lowest, highest = integer_bounds(
                start, options.lowest,
                max(start, rate_knob.requests) if options.highest is None else options.highest)
        else:
            lowest, highest = bounds(rate_knob.rate, options.lowest, options.highest)
    except ValueError as e:
        raise CapacityError(f"{workload.path}: {e}") from None
    if not 0 < options.target <= 1:
        raise CapacityError(f"--attainment: expected a share of requests in (0, 1], "
                            f"got {options.target!r}")
    if not MIN_RESOLUTION <= options.resolution < np.inf:
        raise CapacityError(f"--resolution: expected a finite number >= {MIN_RESOLUTION:g} "
                            f"(the finest the search takes), got {options.resolution!r}")
    max_probes = options.max_probes
    if not (isinstance(max_probes, int) and max_probes >= 1):
        raise CapacityError(f"--max-probes: expected an integer >= 1, got {max_probes!r}")
    return replace(options, lowest=lowest, highest=highest)


class _Prober:
    """Runs probes into the search's folder: the workload at a rate, with the --set values
    every probe keeps; each probe's row kept in the order they ran."""

    def __init__(self, workload: Workload, overrides: Tuple[str, ...], folder: Path, stop,
                 target: float, on_probe: Callable[[dict], None]) -> None:
        self.path, self.folder, self.stop = workload.path, folder, stop
        self.overrides, self.target, self.on_probe = overrides, target, on_probe
        self.rows: List[dict] = []

    def load(self, extra: Tuple[str, ...] = ()) -> Workload:
        """The workload with the kept --set values, those of `extra`'s keys replaced."""
        keys = {o.partition("=")[0] for o in extra}
        kept = tuple(o for o in self.overrides if o.partition("=")[0] not in keys)
        try:
            return load_workload(self.path, kept + extra)
        except WorkloadError as e:
            raise CapacityError(e) from None

    def run(self, rate: float, rate_knob: AnyKnob,
            extra: Tuple[str, ...] = ()) -> Tuple[bool, dict]:
        """(met, row) of the workload at `rate` (a closed loop's: requests in flight), loaded
        with `extra` --set values too."""
        from .sweep import run_workload

        probed = self.load(extra + (rate_knob.override(rate),))
        runs = run_workload(probed, None, self.stop, self.folder)
        if self.stop.is_set() or not runs:
            raise Stopped(f"{len(runs) + len(self.rows)} probe run(s) in {self.folder}, "
                          f"no capacity table")
        run = runs[0]
        knob_columns = dict(concurrency=int(rate), rate=run.value("throughput.requests")) \
            if isinstance(rate_knob, ConcurrencyKnob) else dict(concurrency=None, rate=rate)
        row = dict(_row(run), probe=len(self.rows), **knob_columns,
                   requests=rate_knob.requests, length_check=bool(extra))
        self.rows.append(row)
        met = bool(row["attainment"] >= self.target)  # NaN (nothing measured) misses
        self.on_probe(dict(row, met=met))
        return met, row


def find(workload: Workload, overrides: Tuple[str, ...] = (), options: Options = Options(),
         stop=None, on_probe: Callable[[dict], None] = lambda row: None) -> Capacity:
    """Search the workload (loaded with `overrides`, which every probe keeps) for its
    capacity, starting from its own rate, as `options` say; check the answer on a trace
    twice as long; write the capacity table and the answer (RESULT_FILE); return the
    answer. Stopped when `stop` is set
    during a probe (that probe's run is written whole). CapacityError, before anything is
    written, for an option out of its bounds, named as the command line names it."""
    from fileio.atomic import atomic_open
    from fileio.json_text import json_text

    from ..io.interrupt import Stop
    from ..record.run_folder import new_run_dir
    from ..record.table_sink import write_table

    slo = check(workload)
    rate_knob = knob(workload)
    options = _check_options(workload, rate_knob, options)
    spec = executor_spec(workload.device)
    assert spec is not None and spec.profile is not None  # check(): modeled:<profile>
    folder = new_run_dir(Path(workload.output) / workload.name / "capacity",
                         "".join(c if c.isalnum() or c in "-_." else "-" for c in spec.profile))
    # each probe sets the rate knob itself: a --set of the same key is its start
    prober = _Prober(workload, overrides, folder, Stop() if stop is None else stop,
                     options.target, on_probe)
    if isinstance(rate_knob, ConcurrencyKnob):
        found = search_integers(lambda n: prober.run(n, rate_knob), rate_knob.concurrency,
                                options.resolution, options.lowest, options.highest,
                                options.max_probes)
    else:
        found = search(lambda rate: prober.run(rate, rate_knob), rate_knob.rate,
                       options.resolution, options.lowest, options.highest, options.max_probes)
    answer = None if found.out_of_probes else found.at(found.low)  # None: none met
    length = None if answer is None else _length_check(
        prober, rate_knob, answer.rate, folder / answer.result["run_id"], options)
    capacity = Capacity(found, folder, rate_knob, options, slo, spec.profile, length, workload)
    write_table(capacity.table(), folder, "capacity", workload.table_format)
    with atomic_open(folder / RESULT_FILE) as f:  # a sweep's point's search too
        f.write(json_text(capacity.document) + "\n")
    return capacity


def _length_check(prober: _Prober, rate_knob: AnyKnob, rate: float, run_dir: Path,
                  options: Options) -> LengthCheck:
    """The answer, `rate`, checked for the trace's length: the run at it (`run_dir`) must
    reach its steady state, and the answer is re-run on the workload's trace twice as long
    (a generated trace's requests doubled, a trace file's limit doubled where the file has
    the rows) at the answer less its resolution (in a closed loop, the fewest requests in
    flight within it), where the doubled trace's capacity must be within the resolution of
    the answer or above it. Either failing fails the check; the doubled trace runs even
    where the steady state already failed it, so that both are shown."""
    from ..analysis.steady_state import of_run

    requests = 2 * rate_knob.requests
    generated = prober.load().trace.generate is not None
    key = GENERATED_REQUESTS if generated else FILE_LIMIT
    setting = f"{key}={requests}"
    if not options.length_check:
        return LengthCheck("off", requests, setting)
    steady = of_run(Run.read(run_dir))
    # any run without a window is unsteady: still filling at the last arrival, its plateau
    # reached too late or over too few steps, or no arrival span to be steady in
    unsteady = "" if steady.found else f"the run at the answer reached no steady state: " \
        f"{steady.reason}"
    rate_knob = knob(prober.load((setting,)))  # a trace file's mean rate is the new rows'
    if rate_knob.requests < requests:  # a file short of rows (trace.limit null: all replayed)
        short = (f"the trace file holds {rate_knob.requests} requests, fewer than {requests} "
                 f"(twice the search's)")
        return LengthCheck("failed", requests, setting, reason=f"{unsteady}; {short}",
                           steady=steady) if unsteady else \
            LengthCheck("unchecked", requests, setting, reason=short, steady=steady)
    at = less_resolution(int(rate), options.resolution) \
        if isinstance(rate_knob, ConcurrencyKnob) else rate / (1 + options.resolution)
    met, row = prober.run(at, rate_knob, (setting,))
    return LengthCheck("passed" if met and not unsteady else "failed", requests, setting, row,
                       unsteady, steady)


def less_resolution(concurrency: int, resolution: float) -> int:
    """The fewest requests in flight, at least 1, within `resolution` of `concurrency`:
    the smallest n with n * (1 + resolution) >= concurrency (the answer itself below
    1 / resolution)."""
    n = max(1, math.ceil(concurrency / (1 + resolution)))
    while n * (1 + resolution) < concurrency:
        n += 1
    while n > 1 and (n - 1) * (1 + resolution) >= concurrency:  # the division's rounding
        n -= 1
    return n


def _row(run) -> dict:
    """A probe's row of the capacity table, from its run (the probe's number, rate, requests
    and whether it is the length check added by the search)."""
    row = {column: run.value(f"{metric}.{stat}")
           for column, (metric, stat) in CAPACITY_ROWS.items()}
    row["output_tokens_per_device"] /= run.devices
    return dict(run_id=run.name, **row)
