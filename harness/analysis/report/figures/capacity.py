"""Each arm's capacity search: SLO attainment against the offered rate, one point per
probe, the target, and the bracket where the target met turns to missed (docs/capacity.md),
from the search's capacity table."""

from __future__ import annotations

import math

import numpy as np

from ..capacity import search
from .canvas import done, drawable, figure


def draw(arms):
    found = [(arm, s) for arm in arms if (s := search(arm.runs[0])) is not None]
    if not found:
        return None
    fig, axes = figure(ncols=len(found), width=min(3.8 * len(found) + 0.9, 12.0),
                       height=3.0, sharey=True)
    for ax, (arm, s) in zip(axes[0], found):
        rate, att = drawable(s.rate), drawable(s.attainment)
        keep = np.isfinite(rate) & (rate > 0)
        if math.isfinite(s.capacity) and math.isfinite(s.missed_at):
            ax.axvspan(s.capacity, s.missed_at, color=arm.colour, alpha=0.12, lw=0,
                       label="bracket: met, then missed")
        for where, marker, fill, label in (
                (s.met & ~s.length_check, "o", arm.colour, "met"),
                (~s.met & ~s.length_check, "o", "white", "missed"),
                (s.length_check, "D", "none", "length check (2x requests)")):
            rows = where & keep
            if rows.any():
                ax.plot(rate[rows], np.nan_to_num(att[rows], nan=0.0), marker, ms=6,
                        color=arm.colour, markerfacecolor=fill, label=label, ls="none")
        ax.axhline(s.target, color="#b4531f", ls="--", lw=1.1,
                   label=f"target {s.target:.0%}" if s.target_exact
                   else f"target (at most {s.target:.1%})")
        if s.this.any() and keep[s.this].any():
            ax.plot(rate[s.this & keep], np.nan_to_num(att[s.this & keep], nan=0.0), "o",
                    ms=11, color=arm.colour, markerfacecolor="none", label="this run")
        capacity = f"{s.capacity:,.4g} req/s" if math.isfinite(s.capacity) else "none met"
        ax.set(title=f"{arm.label}: capacity {capacity}", xlabel="offered rate (req/s)",
               ylim=(0, 1.04))
        if keep.any():
            ax.set_xscale("log")
        ax.legend(loc="best", fontsize=7)
    axes[0][0].set_ylabel("SLO attainment")
    return done(fig, "capacity", "Capacity search: SLO attainment against the offered rate",
                "Each probe of the arm's capacity search (its capacity table): filled met the "
                "attainment target, hollow missed it, a diamond the length check on twice the "
                "requests; the dashed line the target, the shaded bracket where met turns to "
                "missed (docs/capacity.md). A probe whose attainment is not a number is drawn "
                "at 0.")
