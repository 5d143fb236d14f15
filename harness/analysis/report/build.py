"""A report folder from run folders: read the runs, group them into arms, draw, write.

The folder is built under a temporary name beside DIR and renamed into place once whole,
so DIR holds a previous report or the new one, never half of one.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence

from ...commands.common import BadInput
from ..runs import find_runs, read_run
from . import arms as arming, comparison, headline, page, trace_events
from .figures import GIL_FIGURES, RUN_FIGURES
from .hardware import profile_figures
from .run_data import RunData

NEEDED = ("steps", "batches", "requests")  # the device table is optional
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
    runs = [RunData(read_run(p)) for p in find_runs(paths)]
    for run in runs:  # before any drawing: a missing table is bad input, named at once
        for table in NEEDED:
            run.run.table_path(table)
        if not len(run.columns("steps", ["step"])["step"]):
            raise BadInput(f"{run.run.path}: no step was recorded (the run stopped before "
                           f"its first step): nothing to report")
    arms, keys = arming.group(runs)
    context = _context(runs, arms, keys)
    out = Path(out)
    if out.exists() and not (out / "index.html").is_file() and any(out.iterdir()):
        raise BadInput(f"{out}: exists and is not a report folder (no index.html); "
                       f"name a new folder or an earlier report's")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{secrets.token_hex(4)}.tmp"
    try:
        (tmp / "figures").mkdir(parents=True)
        for f in context["figures"] + (context["gil"] or {}).get("figures", []):
            (tmp / "figures" / f"{f.name}.png").write_bytes(f.png)
        (tmp / "index.html").write_text(page.html(context))
        (tmp / "summary.md").write_text(page.markdown(context))
        written = []
        if with_trace_events:
            (tmp / "trace-events").mkdir()
            for i, run in enumerate(runs):
                name = f"{i:02d}-{run.name}.json" if len(runs) > 1 else f"{run.name}.json"
                trace_events.write(run, tmp / "trace-events" / name)
                written.append(f"trace-events/{name}")
        _replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Written(out, len(runs), [a.label for a in arms],
                   [f"figures/{p.name}" for p in sorted((out / "figures").iterdir())], written)


def _replace(tmp: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.{secrets.token_hex(4)}.old"
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _context(runs, arms, keys) -> dict:
    figures = [d for f in RUN_FIGURES if (d := f(arms)) is not None]
    gil = hardware = None
    if "gil_mode" in keys and len(arms) > 1:
        gil = dict(table=headline.table(arms, headline.GIL),
                   figures=[d for f in GIL_FIGURES if (d := f(arms)) is not None])
    if "device" in keys and len(arms) > 1:
        table = headline.table(arms, headline.HARDWARE)
        table.rows.insert(2, headline.per_device(arms))
        hardware = dict(table=table, arms=[
            dict(label=a.label, kind="modeled" if a.runs[0].modeled else "measured",
                 profile=profile_figures(a.runs[0].profile) if a.runs[0].modeled else [])
            for a in arms])
    names = {r.manifest["values"].get("name", r.name) for r in runs}
    title = " vs ".join(a.label for a in arms) if len(arms) > 1 else runs[0].name
    kinds = sorted({"modeled" if r.modeled else "measured" for r in runs})
    subtitle = (f"{', '.join(sorted(names))}: {len(runs)} run{'s' * (len(runs) > 1)} in "
                f"{len(arms)} arm{'s' * (len(arms) > 1)}; {' and '.join(kinds)}")
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
    return dict(title=title, subtitle=subtitle, arms=arms, differing=keys, cards=cards,
                kinds=kinds, headline=headline.table(arms), gil=gil, hardware=hardware,
                figures=figures, compare=comparison.rows(arms) if len(arms) == 2 else None)
