"""Per-request latency distributions: TTFT and TPOT CDFs from the requests table, ITL from
the summary's percentiles (a run keeps its inter-token gaps as a histogram, not a table)."""

from __future__ import annotations

import numpy as np

from ....schema.values import COMPLETED
from ..timeline import cdf_points
from .canvas import DRAWABLE, done, drawable, figure, legend_once, nothing, positive, run_label


def _completed(run, name):
    c = run.columns("requests", [name, "status"])
    keep = np.isin(c["status"], COMPLETED)
    return c[name][keep]


def slo_limits(arms, name: str) -> list:
    """The distinct SLO limits (s) on `name` ("ttft", "tpot") that the runs were held to, as
    their summaries record them (`slo ttft`); none where no run gives one."""
    limits = {run.stat("slo", name) for arm in arms for run in arm.runs}
    return sorted(v for v in limits if np.isfinite(v) and 0 < v <= DRAWABLE)


def ttft_tpot(arms):
    fig, axes = figure(ncols=2)
    slo = False
    for ax, (name, title) in zip(axes[0], (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))):
        completed = drawn = False
        for arm in arms:
            for i, run in enumerate(arm.runs):
                values = _completed(run, name)
                x, q = cdf_points(values)
                keep = positive(x * 1e3)  # TPOT 0 (one MTP step) off a log axis
                ax.plot(x[keep] * 1e3, q[keep], color=arm.colour, alpha=0.85,
                        label=run_label(arm, i))
                completed, drawn = completed or len(values) > 0, drawn or bool(keep.any())
        ax.set(title=f"{title} CDF", xlabel=f"{title} (ms)", ylabel="fraction of requests",
               ylim=(0, 1.01))
        if drawn:
            ax.set_xscale("log")
        else:  # a run stopped before any request completed, or every one was rejected
            nothing(ax, f"no {title} above 0 to draw" if completed else "no completed request")
        limits = [ax.axvline(limit * 1e3, color="#b4531f", ls="--", lw=1.2,
                             label=f"SLO {title} {limit * 1e3:,.4g} ms")
                  for limit in (slo_limits(arms, name[:-2]) if drawn else [])]  # `slo`
        slo = slo or bool(limits)
        if len(arms) > 1:
            ax.legend(loc="best")
        elif limits:  # one arm: its lines need no key, the limits do
            ax.legend(handles=limits, loc="best")
    return done(fig, "latency_cdf", "Time to first token and time per output token",
                "Empirical CDFs over every completed request (finished or handed off); one "
                "line per run. Warm-up requests are included here and left out of the "
                "summary's percentiles." + (" The dashed vertical lines are the workload's "
                                            "SLO limits (`slo`)." if slo else ""))


def itl(arms):
    stats = ("min", "p50", "p90", "p95", "p99", "max")
    where = [0.0, 0.5, 0.9, 0.95, 0.99, 1.0]
    fig, axes = figure(height=2.6)
    ax = axes[0][0]
    drawn = False
    for arm in arms:
        for i, run in enumerate(arm.runs):
            x = drawable(np.array([run.stat("itl", s) for s in stats]) * 1e3)
            keep = positive(x)
            if keep.any():
                ax.plot(x[keep], np.array(where)[keep], "o", ls="none", color=arm.colour,
                        label=run_label(arm, i))  # six percentiles: points, not a curve
                drawn = True
    if not drawn:
        return None
    ax.set(title="ITL percentiles", xlabel="inter-token latency (ms)",
           ylabel="fraction of gaps", ylim=(0, 1.01))
    ax.set_xscale("log")
    legend_once(ax, arms)
    return done(fig, "itl", "Inter-token latency",
                "The summary's ITL percentiles (min, p50, p90, p95, p99, max) over every "
                "gap of the measured requests; the run keeps its gaps as a histogram, so "
                "these points are the CDF at those fractions.")
