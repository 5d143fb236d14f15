"""The trend page's context (`steptrace report --history STORE`, docs/report.md, "The trend
page"): each headline metric of the history (HEADLINE's rows the store holds, and every
benchmark's) per configuration over commits, with the change points `history detect` finds.
At most MAX_FIGURES series are drawn, in the configurations' order, each one's metrics in
HEADLINE's; the page says how many were left out."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from ...schema.summary import headline
from .. import change_points, history_bench, history_series, history_store
from .figures import trend as trend_figure

MAX_FIGURES = 60
INSTALL = "pip install --no-deps apache-otava==0.8.0"


def context(store: Path, floors: Optional[dict] = None) -> dict:
    """`floors`: the noise floors by class (change_points.noise_floors; default its own)."""
    stored = history_store.read(store)
    rows = _headline_rows(stored)
    table = history_series.series(rows)
    points, missing = _detect(table, floors)
    order = {key: i for i, key in enumerate(_metric_order(rows))}
    series = sorted(history_series.each_series(table), key=lambda s: (
        _configuration(s[0]), order[s[0]["metric"], s[0]["stat"]]))
    runs = {key: part for key, part in rows.groupby(list(history_series.SERIES), sort=False,
                                                    dropna=False)}
    drawn = []
    with np.errstate(over="ignore", invalid="ignore"):
        for i, (labels, part) in enumerate(series[:MAX_FIGURES]):
            mine = [p for p in points if p.series == labels]
            key = tuple(labels[s] for s in history_series.SERIES)
            figure = trend_figure.draw(f"trend_{i:02d}", f"{labels['metric']}.{labels['stat']}",
                                       part, runs[key], mine)
            drawn.append(dict(figure=figure, configuration=configuration_text(labels),
                              commits=len(part), runs=int(part["runs"].sum()),
                              points=[_point(p) for p in mine]))
    return dict(title=f"History: {store}", store=str(store), series=drawn,
                left_out=max(0, len(series) - MAX_FIGURES), max_figures=MAX_FIGURES,
                commits=stored["commit"].nunique(), runs=stored["run_key"].nunique(),
                total=len(series), missing=missing, install=INSTALL,
                not_judged=change_points.not_judged(table, floors),
                points=[dict(_point(p), series=f"{p.series['metric']}.{p.series['stat']}",
                             configuration=configuration_text(p.series))
                        for p in sorted(points, key=lambda p: p.date_after)])


def _headline_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of HEADLINE's metrics and of every benchmark."""
    wanted = set(_metric_order(rows))
    keep = [(m, s) in wanted for m, s in zip(rows["metric"], rows["stat"])]
    return rows[keep]


def _metric_order(rows: pd.DataFrame) -> List[Tuple[str, str]]:
    """HEADLINE's (metric, stat) rows the runs hold, in its order, then the benchmarks'."""
    of_bench = rows["workload"] == history_bench.WORKLOAD
    present = set(zip(rows["metric"][~of_bench], rows["stat"][~of_bench]))
    bench = sorted(set(zip(rows["metric"][of_bench], rows["stat"][of_bench])))
    return headline(present) + [key for key in bench if key not in present]


def _detect(table: pd.DataFrame, floors: Optional[dict]) -> Tuple[list, Optional[str]]:
    """The change points, and why there are none to show where Otava is missing."""
    try:
        return change_points.detect(table, floors=floors), None
    except ImportError as e:
        return [], str(e)


def _configuration(labels: dict) -> tuple:
    return tuple(str(labels[k]) for k in history_store.CONFIGURATION)


def configuration_text(labels: dict) -> str:
    """The series' configuration in words, as `history show` titles it."""
    kind = "modeled" if labels["modeled"] else "measured"
    gil = f", GIL {labels['gil_mode']}" if labels["gil_mode"] else ""
    return (f"{labels['workload']} ({str(labels['workload_hash'])[:8]}), {labels['device']}, "
            f"{kind}{gil}, host {labels['host']}")


def _point(p) -> dict:
    return dict(before=p.commit_before, after=p.commit_after, date=p.date_after,
                mean_before=f"{p.mean_before:.4g}", mean_after=f"{p.mean_after:.4g}",
                change=p.change_text(), pvalue=f"{p.pvalue:.2g}",
                regression=p.regression, direction=p.direction)
