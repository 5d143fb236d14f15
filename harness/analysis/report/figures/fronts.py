"""A sweep's Pareto fronts: one measure (output tokens/s per device, per kW or per $/h)
against tokens/s per user, one curve per group, each front point labelled with its
configuration; the other points with an answer hollow; those whose capacity search found
none hollow triangles on the x axis; the interactivity levels dashed; every point left
out counted in the caption, by why."""

from __future__ import annotations

import numpy as np
from matplotlib.transforms import Bbox

from ...sweep_state import ANSWER, FAILED, NO_ANSWER, NOT_RUN, REFUSED
from ..sweep_data import MEASURES, USER
from .canvas import done, drawable, figure, nothing

COLOURS = ("#1f6fb4", "#d4651b", "#2f9a4a", "#b8323a", "#7a55b3", "#8c6a2f", "#c256a0",
           "#5f6b75", "#9aa51d", "#1aa3b5")
MAX_LABELS = 40  # front points labelled; beyond, the table below the figure names them


def draw(sweep, measure: str):
    axis = MEASURES[measure][1]
    if measure == "output_tokens_per_kw":  # say whose power: modeled is an estimate
        axis += f" ({' and '.join(_sources(sweep)) or 'unknown'} power)"
    fig, axes = figure(width=7.6, height=4.4)
    ax = axes[0][0]
    on_front = sweep.fronts(measure)
    rows = sweep.rows
    drew = False
    notes: list = []  # (text, point, colour): placed once the axes' limits are known
    for i, group in enumerate(sweep.groups):
        colour = COLOURS[i % len(COLOURS)]
        mine = rows[(rows["group"] == group) & sweep.answered]
        x, y = drawable(mine[USER]), drawable(mine[measure])
        keep = np.isfinite(x) & np.isfinite(y)
        if not keep.any():
            continue
        drew = True
        ax.plot(x[keep], y[keep], "o", ms=4, color=colour, markerfacecolor="none", alpha=0.6)
        best = mine[on_front[mine.index].to_numpy(bool)].sort_values(USER)
        ax.plot(drawable(best[USER]), drawable(best[measure]), "o-", ms=6, color=colour,
                label=f"{group} ({len(best)} on the front of {int(keep.sum())})")
        for (x0, y0), labels in _alike(best, measure).items():
            if len(notes) < MAX_LABELS:  # equal points (ties) share one label
                notes.append(("; ".join(labels), (x0, y0), colour))
    crowded: list = []  # front points whose label found no room
    on_axis = 0
    if not drew:
        nothing(ax, f"no point with an answer has both tokens/s per user and {axis}")
    else:
        on_axis = _without_answer(ax, sweep)
        for level in sweep.levels:
            ax.axvline(level, color="#888", ls="--", lw=0.9)
        ax.set(xlabel="tokens/s per user (1 / TPOT p50)", ylabel=axis)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the top point's label
        shown = rows["state"].isin([ANSWER, NO_ANSWER])
        x = drawable(rows.loc[shown, USER])
        x = np.concatenate([x[np.isfinite(x) & (x > 0)], list(sweep.levels)])
        if x.min() > 0 and x.max() / x.min() > 20:  # levels of 20 beside points of 2,000
            ax.set_xscale("log")
            ax.set_xlim(right=x.max() * 4)  # room for the rightmost point's label
        crowded = annotate(ax, notes)
        ax.legend(loc="best")
    return done(fig, f"fronts_{_name(measure)}",
                f"Pareto fronts: {axis} against tokens/s per user",
                _caption(sweep, measure, axis, on_axis, crowded))


def _without_answer(ax, sweep) -> int:
    """The points whose capacity search found no capacity, each a hollow triangle on the x
    axis at the tokens/s per user its search measured, in its group's colour, one legend
    entry for them all; the count drawn."""
    rows = sweep.rows
    drawn = 0
    for i, group in enumerate(sweep.groups):
        mine = rows[(rows["group"] == group) & (rows["state"] == NO_ANSWER)]
        x = drawable(mine[USER])
        x = x[np.isfinite(x) & (x > 0)]
        if len(x):
            ax.plot(x, np.zeros(len(x)), "v", ms=7, color=COLOURS[i % len(COLOURS)],
                    markerfacecolor="none", clip_on=False, zorder=5)
            drawn += len(x)
    if drawn:
        ax.plot([], [], "v", ms=7, color="#555", markerfacecolor="none",
                label=f"no answer ({drawn}): no capacity found")
    return drawn


def _caption(sweep, measure: str, axis: str, on_axis: int, crowded: list) -> str:
    return (f"Each group's ({sweep.front_by}) points with an answer (hollow) and its Pareto "
            f"front (filled, joined): the points no other point of the group beats on both "
            f"{axis} and tokens/s per user, each labelled with its configuration (its axis "
            f"values). Dashed: the interactivity levels of the table below "
            f"(docs/sweeps.md, \"Fronts and the report\")."
            + (f" Hollow triangles on the x axis: {on_axis} point(s) whose capacity search "
               f"found no capacity, at the tokens/s per user it measured; on no front."
               if on_axis else "")
            + _not_drawn(sweep, measure, axis, on_axis)
            + (f" Unlabelled, where a label would overlap another: {'; '.join(crowded)}."
               if crowded else ""))


def _not_drawn(sweep, measure: str, axis: str, on_axis: int) -> str:
    """The caption's count of the points the figure leaves out, by why: a point with an
    answer but without one of the two values (per group), a search that found no capacity
    and measured no tokens/s per user, failed, not run, refused."""
    rows = sweep.rows
    answered = rows[sweep.answered]
    blank = ~(np.isfinite(drawable(answered[USER])) & np.isfinite(drawable(answered[measure])))
    lacking = [f"{n} point(s) of {group} with an answer but no {axis} or tokens/s per user"
               for group, n in answered[blank].groupby("group", sort=False).size().items()]
    unplaced = int((rows["state"] == NO_ANSWER).sum()) - on_axis
    others = [f"{unplaced} point(s) whose capacity search found no capacity"] if unplaced \
        else []
    others += [f"{n} {state}" for state, n in
               ((s, int((rows["state"] == s).sum())) for s in (FAILED, NOT_RUN, REFUSED)) if n]
    if not lacking + others:
        return ""
    return (f" Not drawn: {'; '.join(lacking + others)}"
            + (" (the table of points without an answer, below, says why)" if others else "")
            + ".")


def _sources(sweep) -> list:
    rows = sweep.rows
    known = rows.loc[(rows["status"] == "done") & rows["output_tokens_per_kw"].notna()]
    return sorted({str(s) for s in known.get("power_source", []) if isinstance(s, str) and s})


def _alike(best, measure: str) -> dict:
    """The front's points by position, each position's configurations in order."""
    out: dict = {}
    for _, r in best.iterrows():
        out.setdefault((float(r[USER]), float(r[measure])), []).append(str(r["label"]))
    return out


def _name(measure: str) -> str:
    return {"output_tokens_per_device": "per_device", "output_tokens_per_kw": "per_kw",
            "output_tokens_per_dollar_hour": "per_dollar_hour"}[measure]


# Where a label may go beside its point, in points: beside it, then further above and
# below; each on the side with room first (left of a point in the right half of the axes).
OFFSETS = [(4, dy) for dy in (3, -3, 10, -10, 17, -17, 24, -24)]


def annotate(ax, notes) -> list:
    """Each label beside its point, at the first of OFFSETS where it stays inside the axes
    and overlaps no label placed before it and no labelled point (extents as the renderer
    lays them out); the labels with no such place are left out, and returned for the
    caption to name."""
    renderer = ax.figure.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    to_axes = ax.transAxes.inverted()
    r = renderer.points_to_pixels(3.5)  # a front point's marker, 6 points across
    placed = [Bbox.from_extents(x - r, y - r, x + r, y + r) for x, y in
              (ax.transData.transform(point) for _, point, _ in notes)]
    left_out = []
    for text, (x0, y0), colour in notes:
        right = to_axes.transform(ax.transData.transform((x0, y0)))[0] > 0.5
        sides = (-1, 1) if right else (1, -1)
        for dx, dy in [(side * dx, dy) for dx, dy in OFFSETS for side in sides]:
            note = ax.annotate(text, (x0, y0), fontsize=6.5, xytext=(dx, dy),
                               ha="right" if dx < 0 else "left",
                               va="bottom" if dy > 0 else "top", textcoords="offset points",
                               color=colour, annotation_clip=True)
            box = note.get_window_extent(renderer)
            if inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 \
                    and box.y1 <= inside.y1 and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
            note.remove()
        else:
            left_out.append(text)
    return left_out
