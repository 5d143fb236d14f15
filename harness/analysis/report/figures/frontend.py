"""The serving frontend's side of a GIL sweep (docs/gil.md's primary frontend metrics): each
run's enqueue drift p99, delivery delay p99 and the frontend thread's CPU share, a dot per
run in its arm's column, the arm's median a bar across it."""

from __future__ import annotations

import numpy as np

from .canvas import done, figure, nothing

METRICS = (("enqueue_drift", "p99", "enqueue drift p99", "ms", 1e3),
           ("delivery_delay", "p99", "delivery delay p99", "ms", 1e3),
           ("frontend", "cpu_share", "frontend thread CPU", "% of one core", 1.0))


def draw(arms):
    values = {m: [[r.stat(m, s) * scale for r in arm.runs] for arm in arms]
              for m, s, _, _, scale in METRICS}
    if all(np.isnan(v).all() for per_arm in values.values() for v in per_arm if v):
        return None  # no frontend thread in these runs (an inline frontend, a modeled run)
    fig, axes = figure(ncols=3, width=10.5, height=3.0)
    for ax, (metric, _, title, unit, _) in zip(axes[0], METRICS):
        drawn = False
        for x, (arm, runs) in enumerate(zip(arms, values[metric])):
            v = np.asarray(runs, dtype=float)
            v = v[np.isfinite(v)]
            if not len(v):
                continue
            jitter = np.linspace(-0.15, 0.15, len(v)) if len(v) > 1 else np.zeros(1)
            ax.scatter(x + jitter, v, color=arm.colour, s=16, alpha=0.85, zorder=3)
            ax.hlines(np.median(v), x - 0.3, x + 0.3, color=arm.colour, linewidth=2.2)
            drawn = True
        ax.set_xticks(range(len(arms)), [arm.label for arm in arms], rotation=15)
        ax.set(title=title, ylabel=unit, xlim=(-0.6, len(arms) - 0.4))
        if not drawn:
            nothing(ax, "no run has a frontend thread")
    return done(fig, "frontend", "The frontend's side, per arm",
                "A dot per run, the bar its arm's median: the frontend thread's enqueue drift "
                "p99 (how late it enqueued a request), delivery delay p99 (how late a committed "
                "token reached the client) and its CPU share, docs/gil.md's primary frontend "
                "metrics, which the verdict above compares.")
