"""The engine's load over the run: sequences running and waiting, and free KV blocks,
summed over DP ranks."""

from __future__ import annotations

from ..timeline import binned, per_step
from .canvas import done, drawable, figure, legend_once, run_label

SERIES = (("running", "running sequences"), ("waiting", "waiting sequences"),
          ("kv_blocks_free", "free KV blocks"))


def steps_over_time(run, names, how="sum"):
    """(time bins, {name: binned per-step value}) of steps-table columns."""
    c = run.columns("steps", ["step", "t_start_s", *names])
    steps, first = per_step(c["step"], {"t": c["t_start_s"]}, "first")
    _, values = per_step(c["step"], {n: c[n] for n in names}, how)
    return binned(first["t"], values)


def draw(arms):
    fig, axes = figure(ncols=3, width=10.5, height=2.9)
    for arm in arms:
        for i, run in enumerate(arm.runs):
            t, v = steps_over_time(run, [n for n, _ in SERIES])
            for ax, (name, _) in zip(axes[0], SERIES):
                ax.plot(drawable(t), drawable(v[name]), color=arm.colour, alpha=0.85,
                        label=run_label(arm, i))
    for ax, (_, title) in zip(axes[0], SERIES):
        ax.set(title=title, xlabel="time (s)")
        ax.set_ylim(bottom=0)
    legend_once(axes[0][0], arms)
    return done(fig, "load", "Requests in flight, waiting queue and free KV blocks",
                "After each step's round, summed over DP ranks; averaged into at most 1,500 "
                "time bins for drawing.")
