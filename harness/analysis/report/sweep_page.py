"""The sweep page (`steptrace report SWEEP_DIR`, docs/report.md, "The sweep page"): a
frontier search's answer first where the folder holds one (frontier_section.py), the
fronts of a `steptrace sweep`'s table, the best configuration per group at each
interactivity level with its ratio to the first group's, and the points without an answer
(found none, failed, not run or refused) with why, written as `build` writes a report (the
same rules for DIR)."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .. import sweep_state
from . import destination, frontier_section, page
from .build import Written, _write_folder
from .figures import fronts
from .frontier_data import read_frontier
from .headline import fmt
from .sweep_data import LEVELS, MEASURES, Sweep, read_sweep, why

SWEEP_ROLE = "the sweep folder {}, which the page is drawn from"


def is_sweep(path: Path) -> bool:
    """A `steptrace sweep`'s folder: it holds the sweep table."""
    return (Path(path) / "sweep.parquet").is_file()


def build_sweep(folder: Path, out: Path, front_by: Optional[str] = None,
                levels: Sequence[float] = LEVELS) -> Written:
    """The sweep page of the sweep in `folder`, written to `out` as `build` writes a report;
    BadInput (nothing written) for a table that is not a sweep's or an `out` that is
    neither new nor a report."""
    out, folder = Path(out), Path(folder)
    destination.check(out, [folder], SWEEP_ROLE)
    sweep = read_sweep(folder, front_by, levels)
    frontier = read_frontier(folder, sweep.rows)
    with np.errstate(over="ignore", invalid="ignore"):
        context = _context(sweep)
        context["frontier"] = frontier_section.context(frontier) if frontier else None
    drawn = (context["frontier"]["figures"] if frontier else []) + [
        m["figure"] for m in context["measures"]]
    files = [(f"figures/{d.name}.png", d.png) for d in drawn]
    files += [("index.html", page.sweep_html(context).encode()),
              ("summary.md", page.sweep_markdown(context).encode())]
    command = shlex.join(["steptrace", "report", str(folder), "-o", str(out),
                          *(["--front-by", front_by] if front_by else []),
                          "--interactivity", ",".join(f"{x:g}" for x in sweep.levels)])
    _write_folder(out, [folder], [], files, command, False, SWEEP_ROLE)
    return Written(out, int(sweep.answered.sum()), list(sweep.groups),
                   sorted(n for n, _ in files if n.startswith("figures/")))


def _context(sweep: Sweep) -> dict:
    rows = sweep.rows
    measures = []
    for measure in sweep.measures:
        best = sweep.best(measure)
        measures.append(dict(key=measure, short=MEASURES[measure][0],
                             axis=MEASURES[measure][1], figure=fronts.draw(sweep, measure),
                             best=[_best(b, sweep.groups) for b in best]))
    sources = sorted({str(s) for s in rows.get("power_source", []) if isinstance(s, str) and s})
    return dict(title=f"Sweep: {sweep.path.name}", folder=str(sweep.path),
                front_by=sweep.front_by, groups=sweep.groups,
                counts=sweep_state.said(sweep.counts), levels=[f"{x:g}" for x in sweep.levels],
                measures=measures, power_sources=sources,
                first=sweep.groups[0] if sweep.groups else "",
                not_done=[dict(state=r["state"], shown=_shown(r), group=r["group"],
                               point=r["point"] or "-", label=r["label"], reason=why(r))
                          for _, r in sweep.not_done.iterrows()])


def _shown(row) -> str:
    """A point without an answer as its status cell reads: its state, and for a search that
    found none, its outcome."""
    if row["state"] == sweep_state.NO_ANSWER:
        return f"{row['state']} ({row['outcome']})"
    return str(row["state"])


def _best(b, groups) -> dict:
    first = b.group == groups[0]
    return dict(group=b.group, level=f"{b.level:g}", point=b.point or "-",
                raw=repr(b.value), raw_ratio=repr(b.ratio),
                label=b.label, value=fmt(b.value),
                per_user=fmt(b.per_user), met=bool(b.point),
                ratio="1 (reference)" if first and b.point else
                ("-" if not math.isfinite(b.ratio) else f"{b.ratio:.2f}x"))
