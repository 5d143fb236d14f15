"""A frontier search's fronts (docs/frontier.md, "The front and its readings"): one curve a
device, its front of output (or total) tok/s per device against tok/s per user joined in x
order, each front point labelled with its deployment and concurrency; every eligible rung
hollow beside it; the levels the fronts are read at dashed; the rungs left off counted in
the caption."""

from __future__ import annotations

import numpy as np

from ..frontier_data import DRAWN
from .canvas import done, drawable, figure, nothing
from .fronts import COLOURS, MAX_LABELS, annotate

AXES = {"output": "output tok/s per device", "total": "total tok/s per device (prompt and "
                                                     "output)"}
USER = "tokens_per_s_per_user"


def draw(frontier, metric: str, timed: str):
    """`timed`: what timed the steps, for the caption (the runs' manifests)."""
    column, flag = DRAWN[metric]
    axis = AXES[metric]
    points = frontier.points
    fig, axes = figure(width=7.6, height=4.6)
    ax = axes[0][0]
    notes: list = []  # (text, point, colour): placed once the axes' limits are known
    drew = False
    for i, device in enumerate(frontier.devices):
        drew |= _device(ax, points[(points["device"] == device) & points["eligible"]],
                        device, column, flag, COLOURS[i % len(COLOURS)], notes)
    crowded: list = []
    if not drew:
        nothing(ax, f"no eligible rung has both tok/s per user and {axis}")
    else:
        for level in frontier.levels:
            ax.axvline(level, color="#888", ls="--", lw=0.9)
        ax.set(xlabel="tok/s per user (steady window)", ylabel=axis)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the top point's label
        x = drawable(points.loc[points["eligible"], USER])
        x = np.concatenate([x[np.isfinite(x) & (x > 0)], frontier.levels])
        if x.min() > 0 and x.max() / x.min() > 20:
            ax.set_xscale("log")
            ax.set_xlim(right=x.max() * 4)  # room for the rightmost point's label
        ax.set_title(("modeled; " if frontier.modeled else "") + "over each run's steady "
                     "window", loc="left", fontsize=8.5, fontweight="normal", color="#555")
        crowded = annotate(ax, notes)
        ax.legend(loc="best")
    off = int((~points["eligible"]).sum())
    return done(fig, f"device_fronts_{metric}",
                f"Each device's front: {axis} against tok/s per user",
                f"Each device's eligible rungs (hollow) and its front of {axis} (filled, "
                f"joined in order of tok/s per user): the rungs no other of its rungs beats "
                f"on both, each labelled deployment @ concurrency. Dashed: the levels the "
                f"table below reads the fronts at. {timed} Every figure is over the run's "
                f"steady window, its fill and drain left out (docs/frontier.md)."
                + (f" Not drawn: {off} rung(s) left off the fronts (the table below says "
                   f"why)." if off else "")
                + (f" Unlabelled, where a label would overlap another: {'; '.join(crowded)}."
                   if crowded else ""))


def _device(ax, mine, device: str, column: str, flag: str, colour, notes: list) -> bool:
    """One device's eligible rungs (hollow) and its front (joined), its front points' labels
    added to `notes`; False where it has no point to draw."""
    x, y = drawable(mine[USER]), drawable(mine[column])
    keep = np.isfinite(x) & np.isfinite(y)
    if not keep.any():
        return False
    ax.plot(x[keep], y[keep], "o", ms=4, color=colour, markerfacecolor="none", alpha=0.6)
    front = mine[mine[flag].to_numpy(bool)].sort_values(USER, kind="stable")
    ax.plot(drawable(front[USER]), drawable(front[column]), "o-", ms=6, color=colour,
            label=f"{device} ({len(front)} on the front of {int(keep.sum())} eligible)")
    for (x0, y0), labels in _alike(front, column).items():
        if len(notes) < MAX_LABELS:  # equal points share one label
            notes.append(("; ".join(labels), (x0, y0), colour))
    return True


def _alike(front, column: str) -> dict:
    """The front's points by position, each position's rungs in order."""
    out: dict = {}
    for _, r in front.iterrows():
        out.setdefault((float(r[USER]), float(r[column])), []).append(
            f"{r['deployment']} @ {r['concurrency']}")
    return out
