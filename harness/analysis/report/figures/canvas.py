"""What every figure shares: the Agg backend, one look, and the PNG it becomes."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

STYLE: Dict[RcKeyType, Any] = {
    "figure.dpi": 100, "savefig.dpi": 110, "font.size": 9.5, "axes.titlesize": 10.5,
    "axes.titleweight": "bold", "axes.spines.top": False, "axes.spines.right": False,
    "axes.grid": True, "grid.color": "#e3e6ea", "grid.linewidth": 0.8,
    "axes.edgecolor": "#9aa3ad", "axes.labelcolor": "#333", "xtick.color": "#555",
    "ytick.color": "#555", "legend.frameon": True, "legend.framealpha": 0.85,
    "legend.edgecolor": "none", "legend.fontsize": 8.5,
    "lines.linewidth": 1.4,
    # labels carry names from run folders: "$" is text, never mathtext (a bad one raises)
    "text.parse_math": False,
}
# The largest magnitude drawn: matplotlib's transforms overflow on values near the largest
# double, and nothing a figure draws comes within a hundred orders of magnitude of this.
DRAWABLE = 1e200


@dataclass
class Drawn:
    name: str      # the PNG's file name, without .png
    title: str
    caption: str   # what the figure shows and what it is built from
    png: bytes
    badge: str = ""  # what times the figure where not the runs' kinds ("host")


def figure(ncols: int = 1, nrows: int = 1, width: float = 7.2, height: float = 3.2, **kw):
    """Fixed margins in inches: a layout engine measures every tick label again on each
    draw, and costs more than the drawing."""
    plt.rcParams.update(STYLE)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, **kw)
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.8 / width, bottom=0.55 / height,
                        top=1 - 0.35 / height, wspace=0.32, hspace=0.6 * 3 / height * nrows)
    return fig, axes


def done(fig, name: str, title: str, caption: str, decades=(), badge: str = "") -> Drawn:
    """The figure as a PNG. `decades`: log axes that may span many decades, ticked at
    powers of ten only (1, 2 and 5 per decade crowd their labels); any other log axis is
    too where its labels at 1, 2 and 5 would not fit its length (`crowded`)."""
    for ax in fig.axes:  # log axes labelled 1000, not 10^3, no minor ticks: each tick and
        # its mathtext label cost more than the data
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log":
                subs = (1.0,) if any(axis is a for a in decades) or crowded(fig, ax, axis) \
                    else (1.0, 2.0, 5.0)
                axis.set_major_locator(ticker.LogLocator(subs=subs, numticks=min(
                    7, max(2, int(_length(fig, ax, axis) / LABEL_ROOM[axis.axis_name])))))
            if axis.get_scale() in ("log", "symlog"):
                axis.set_major_formatter(ticker.FuncFormatter(_plain))
                axis.set_minor_locator(ticker.NullLocator())
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return Drawn(name, title, caption, buf.getvalue(), badge)


# The room a tick label takes along its axis, in inches, at STYLE's font: "10,000" across,
# one line of text up.
LABEL_ROOM = {"x": 0.6, "y": 0.25}


def crowded(fig, ax, axis) -> bool:
    """Whether a log axis's labels at 1, 2 and 5 per decade need more room than its
    length: three a decade of its view, each LABEL_ROOM apart."""
    low, high = sorted(axis.get_view_interval())
    if not (0 < low < high and np.isfinite(high)):
        return False
    return 3 * np.log10(high / low) + 1 > _length(fig, ax, axis) / LABEL_ROOM[axis.axis_name]


def _length(fig, ax, axis) -> float:
    """The axis's length in inches."""
    width, height = fig.get_size_inches() * ax.get_position().size
    return float(width if axis is ax.xaxis else height)


def drawable(values) -> np.ndarray:
    """The values to draw as floats, those no axis can hold (non-finite, or beyond
    DRAWABLE) as NaN: a gap in a line, a point left out. Statistics never use these."""
    v = np.asarray(values, np.float64)
    return np.where(np.abs(v) <= DRAWABLE, v, np.nan)


def positive(values) -> np.ndarray:
    """Where the values can be drawn on a log axis."""
    v = drawable(values)
    return np.isfinite(v) & (v > 0)


def nothing(ax, why: str) -> None:
    """A panel with nothing to draw says why, in its middle, without ticks; its axes stay
    linear (a log axis with no value above 0 cannot be drawn)."""
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
    ax.set(xticks=[], yticks=[])


def legend_once(ax, arms) -> None:
    """A legend only where there is more than one arm to tell apart."""
    if len(arms) > 1:
        ax.legend(loc="best")


def run_label(arm, i: int):
    """A line's legend label: the arm's on its first run only."""
    return arm.label if i == 0 else None


def _plain(value: float, _position) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"
