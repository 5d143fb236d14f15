"""A report folder from run folders: read the runs, group them into arms, draw, write.

Everything but the trace events (read as they are written) is read, drawn and rendered
before anything is written, and DIR is checked before and again after (destination.py: a
new folder or a report this command made, nothing else). The folder is built under a
temporary name beside DIR, every file on disk, its marker last, and renamed into place
once whole, so DIR holds a previous report or the new one, never half of one; a write that
fails removes the temporary folder and leaves DIR as it was.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence

import numpy as np

from fileio.atomic import WriteFailed

from ...errors import BadInput
from ...record.run import POOLS, Run
from .. import change_points
from ..runs import find_runs
from . import arms as arming, comparison, destination, headline, page, trace_events, trend
from .capacity import search
from .figures import ENGINE_FIGURES, GIL_FIGURES, RUN_FIGURES, capacity as capacity_figure
from .hardware import profile
from .run_data import RunData

NEEDED = ("steps", "batches", "requests")  # the device table is optional
CLIENT_NEEDED = ("requests",)  # a run against an endpoint: no engine, no steps
RUNS_ROLE = "the run folder {}, which the report reads"
STORE_ROLE = "the history store {}, which the page is drawn from"
CARDS = [("throughput", "output_tokens"), ("ttft", "p99"), ("tpot", "p50"), ("mfu", "model"),
         ("sched_call", "p50")]


@dataclass
class Written:
    dir: Path
    runs: int
    arms: List[str]
    figures: List[str] = field(default_factory=list)
    trace_events: List[str] = field(default_factory=list)


def build(paths: Sequence[Path], out: Path, with_trace_events: bool = False) -> Written:
    """The report of the runs under `paths` in `out`. BadInput (nothing written) for runs
    that cannot be reported or an `out` that is neither new nor a report this command made;
    WriteFailed, naming the file, where the folder cannot be written (`out` as it was)."""
    out = Path(out)
    found = find_runs(paths)
    destination.check(out, found)
    runs = [RunData(Run.read(p)) for p in found]
    for run in runs:  # before any drawing: a missing table is bad input, named at once
        for table in NEEDED if run.engine else CLIENT_NEEDED:
            run.run.table_path(table)
        if with_trace_events and not run.engine:
            raise BadInput(f"{run.run.path}: a run against an endpoint has no engine steps "
                           f"for --trace-events to draw")
        if run.engine and not len(run.columns("steps", ["step"])["step"]):
            raise BadInput(f"{run.run.path}: no step was recorded (the run stopped before "
                           f"its first step): nothing to report")
    arms, keys = arming.group(runs)
    if "gil_mode" in keys:  # a GIL sweep's arms in the workload's order, released first
        arms = arming.in_gil_order(arms)
    # A table may hold any double: a unit, a sum or a median past the largest is inf, which
    # a figure leaves out and a table shows as "–".
    with np.errstate(over="ignore", invalid="ignore"):
        context = _context(runs, arms, keys)
    files = [(f"figures/{f.name}.png", f.png)
             for f in context["figures"] + (context["gil"] or {}).get("figures", [])
             + (context["hardware"] or {}).get("figures", [])]
    files += [("index.html", page.html(context).encode()),
              ("summary.md", page.markdown(context).encode())]
    command = shlex.join(["steptrace", "report", *map(str, paths), "-o", str(out),
                          *["--trace-events"] * with_trace_events])
    events = _write_folder(out, found, runs, files, command, with_trace_events)
    return Written(out, len(runs), [a.label for a in arms],
                   sorted(n for n, _ in files if n.startswith("figures/")), events)


def build_history(store: Path, out: Path, noise_floors: Sequence[str] = ()) -> Written:
    """The trend page of the history `store` in `out`, written as `build` writes a report
    (the same rules for `out`; the store is read, never written); `noise_floors` as
    `history detect --noise-floor` takes them."""
    out, store = Path(out), Path(store)
    floors = change_points.noise_floors(noise_floors)
    destination.check(out, [store], STORE_ROLE)
    context = trend.context(store, floors)
    figures = [s["figure"] for s in context["series"]]
    files = [(f"figures/{f.name}.png", f.png) for f in figures]
    files += [("index.html", page.trend_html(context).encode()),
              ("summary.md", page.trend_markdown(context).encode())]
    command = shlex.join(["steptrace", "report", "--history", str(store), "-o", str(out),
                          *(a for f in noise_floors for a in ("--noise-floor", f))])
    _write_folder(out, [store], [], files, command, False, STORE_ROLE)
    return Written(out, context["runs"], [], sorted(n for n, _ in files
                                                    if n.startswith("figures/")))


def _write_folder(out: Path, found, runs, files, command: str, with_trace_events: bool,
                  role: str = RUNS_ROLE):
    """The report's folder built under a temporary name beside `out` and renamed into
    place whole; the trace-event files written (their names)."""
    where = Path(os.path.abspath(out))  # `-o .` has no name to put a temporary folder beside
    tmp = where.parent / f".{where.name}.{secrets.token_hex(4)}.tmp"
    written = []
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        (tmp / "figures").mkdir(parents=True)
        for name, data in files:
            _write(tmp, out, name, data)
        if with_trace_events:
            written = _write_trace_events(tmp, out, runs)
        _write(tmp, out, destination.MARKER,
               destination.marker(command, [n for n, _ in files] + written))
        destination.check(out, found, role)  # again: a file put there while the report was drawn
        _replace(tmp, where, out)
    except WriteFailed:
        raise
    except OSError as e:  # a folder that could not be made
        raise WriteFailed(out, e) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written


def _write_trace_events(tmp: Path, out: Path, runs) -> List[str]:
    (tmp / "trace-events").mkdir()
    written = []
    for i, run in enumerate(runs):
        name = f"{i:02d}-{run.name}.json" if len(runs) > 1 else f"{run.name}.json"
        try:
            trace_events.write(run, tmp / "trace-events" / name)
        except WriteFailed as e:
            raise WriteFailed(out / "trace-events" / name, e) from e
        written.append(f"trace-events/{name}")
    return written


def _write(tmp: Path, out: Path, name: str, data: bytes) -> None:
    """One file of the folder being built, on disk before the folder is renamed into place;
    an error names it as `out` would hold it."""
    try:
        with open(tmp / name, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise WriteFailed(out / name, e) from e


def _replace(tmp: Path, where: Path, out: Path) -> None:
    """The finished folder renamed to `where` (`out` as given). An earlier report there is
    renamed aside first and removed after; if the rename fails it is put back."""
    aside = None
    try:
        if where.exists():
            old = where.parent / f".{where.name}.{secrets.token_hex(4)}.old"
            os.rename(where, old)
            aside = old
        os.rename(tmp, where)
    except OSError as e:
        if aside is not None:
            os.rename(aside, where)
        raise WriteFailed(out, e) from e
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _hardware(arms, keys) -> dict:
    """The hardware page: arms that differ by device, or by deployment (a P/D deployment
    against a co-located one, or against another xPyD). Per-device figures are over every
    device the run ran on (a P/D run's: both pools'); with a P/D arm, each arm's deployment
    is named with its pools' layout, and the pools' rows follow."""
    pd = any(r.disaggregated for a in arms for r in a.runs)
    table = headline.table(arms, headline.HARDWARE + (headline.HARDWARE_PD if pd else []))
    table.rows.insert(2, headline.per_device(arms))
    if pd:
        table.rows.insert(3, headline.per_device(arms, ("throughput", "total_tokens"),
                                                 "total tokens per device"))
        table.rows.insert(0, headline.devices(arms))
    out = []
    for a in arms:
        run = a.runs[0]
        arm = dict(label=a.label, kind=run.kind,
                   profile=profile(run) if run.modeled else None,
                   layout=run.run.layout if pd else "")
        elsewhere = {role: run.run.pool_device(role) for role in POOLS if run.disaggregated
                     and run.run.pool_device(role) != run.run.pool_device()}
        if arm["profile"] is not None and elsewhere:  # the manifest holds one profile
            pools = "; ".join(f"the {role} pool runs on {device}"
                              for role, device in elsewhere.items())
            arm["profile"].note = " ".join(filter(None, [arm["profile"].note, (
                f"{pools[:1].upper()}{pools[1:]}, whose figures the run's manifest does not "
                f"record: these are {run.run.pool_device()}'s.")]))
        out.append(arm)
    searched = capacity_figure.draw(arms)
    return dict(answer=headline.answer(arms, _capacity), table=table, arms=out,
                figures=[searched] if searched is not None else [],
                title="Hardware comparison" if "device" in keys else "Deployment comparison",
                differ="device" if "device" in keys else "deployment")


def _capacity(run) -> float:
    """The rate at capacity of the search whose run at capacity `run` is; NaN otherwise."""
    s = search(run)
    return s.capacity if s is not None and s.at_capacity else float("nan")


def _kind_said(kind: str, runs) -> str:
    """A kind of run in the subtitle; "emulated" as the devices emulated, with the host that
    did their work ("H200 (emulated on x86_64: the host's CPU doing its work)")."""
    if kind != "emulated":
        return kind
    return ", ".join(sorted({r.device for r in runs if r.kind == kind}))


def _context(runs, arms, keys) -> dict:
    engines = all(r.engine for r in runs)
    figures = [d for f in RUN_FIGURES if (engines or f not in ENGINE_FIGURES)
               and (d := f(arms)) is not None]
    gil = hardware = None
    compare = comparison.rows(arms) if len(arms) == 2 else None
    if "gil_mode" in keys and len(arms) > 1:
        verdict = comparison.verdict(arms)
        medians = headline.table(arms, headline.GIL)
        if verdict:  # each arm against the released one, not against the first
            medians = headline.Table(medians.columns[:-1], [r[:-1] for r in medians.rows])
            compare = None
        gil = dict(table=medians, verdict=verdict,
                   figures=[d for f in GIL_FIGURES if (d := f(arms)) is not None])
    if ("device" in keys or "deployment" in keys) and len(arms) > 1:
        hardware = _hardware(arms, keys)
    names = {r.run.values.get("name", r.name) for r in runs}
    kinds = sorted({r.kind for r in runs})
    said = " and ".join(_kind_said(k, runs) for k in kinds)
    if len(runs) == 1:  # the workload's name, the run beneath
        title = str(runs[0].run.values.get("name", runs[0].name))
        subtitle = f"run {runs[0].name}; {said}"
    else:
        title = " vs ".join(a.label for a in arms) if len(arms) > 1 else runs[0].name
        subtitle = (f"{', '.join(sorted(names))}: {len(runs)} runs in "
                    f"{len(arms)} arm{'s' * (len(arms) > 1)}; {said}")
    notes = [f"{r.name}: {note}" for r in runs for note in r.run.notes]  # as `show` says
    incomplete = [r.name for r in runs if not r.complete]
    if incomplete:
        subtitle += f"; incomplete: {', '.join(incomplete)}"
    cards = []
    if len(arms) == 1:
        for key in CARDS:
            if any(key in r.summary for r in runs):
                cards.append(dict(key=" ".join(key), value=headline.fmt(
                    headline.arm_median(arms[0], key)), unit=next(
                    r.summary[key][1] for r in runs if key in r.summary)))
    table, host = headline.table(arms, ratio="ratio to released" if gil and gil["verdict"]
                                 else "ratio to first"), None
    if hardware:  # the devices' figures apart from the harness host's own
        table, host = headline.split_host(table)
    return dict(title=title, subtitle=subtitle, notes=notes, arms=arms, differing=keys,
                cards=cards, kinds=kinds, headline=table, host=host, gil=gil,
                hardware=hardware, figures=figures,
                compare=compare)
