"""One series of the history across commits: each run a point, the per-commit median a line,
each change point a dashed line between the two commits it lies between."""

from __future__ import annotations

import math

import numpy as np

from .canvas import done, drawable, figure

RUN, MEDIAN, CHANGE, REGRESSION = "#8fa9c4", "#1f6fb2", "#6b7785", "#b4531f"
TICKS = 16  # commit labels at most along the axis: every k-th commit beyond


def draw(name: str, title: str, part, runs, points):
    """`part`: the series' rows in commit order (history_series.COLUMNS); `runs`: its store
    rows (a value per run and commit); `points`: its change points."""
    fig, axes = figure(height=3.4)
    fig.subplots_adjust(bottom=0.75 / 3.4)  # room for the commits' slanted names
    ax = axes[0][0]
    at = {commit: i for i, commit in enumerate(part["commit"])}
    ax.plot([at[c] for c in runs["commit"]], drawable(runs["value"]), "o", ls="none", ms=3.5,
            color=RUN, alpha=0.8, label="runs")
    ax.plot(np.arange(len(part)), drawable(part["median"]), color=MEDIAN, marker=".",
            label="median of the commit's runs")
    for p in points:
        x = at[p.commit_after] - 0.5
        colour = REGRESSION if p.regression else CHANGE
        ax.axvline(x, color=colour, ls="--", lw=1.2)
        ax.text(x, 0.98, f" {p.commit_before[:7]} -> {p.commit_after[:7]}: "
                f"{p.change_text()}", transform=ax.get_xaxis_transform(), color=colour,
                ha="left", va="top", fontsize=8)
    step = max(1, math.ceil(len(part) / TICKS))
    ticks = list(range(0, len(part), step))
    ax.set_xticks(ticks, [str(part["commit"].iloc[i])[:7] for i in ticks], rotation=30,
                  ha="right", fontsize=7.5)
    ax.set(title=title, ylabel=str(part["unit"].iloc[0]) or "value",
           xlim=(-0.5, max(len(part) - 0.5, 0.5)))
    ax.legend(loc="best")
    return done(fig, name, title,
                "Each point a run, the line the median of each commit's runs, commits in "
                "the order of their dates; a dashed line a change point (orange: a "
                "regression), labelled with the commits either side and the change of the "
                "segments' means.")
