"""The scheduler's latency per arm: the schedule() call as Python sees it (sched_call) and
the time inside C++ (sched_cpp), as CDFs over every measured step."""

from __future__ import annotations

from ..timeline import cdf_points, per_step
from .canvas import done, figure, legend_once, nothing, positive, run_label


def draw(arms):
    fig, axes = figure(ncols=2, width=10.0, height=3.2)
    for ax, (name, title) in zip(axes[0], (("sched_call_ns", "sched_call"),
                                            ("sched_cpp_ns", "sched_cpp"))):
        drawn = False
        for arm in arms:
            for i, run in enumerate(arm.runs):
                c = run.columns("steps", ["warmup", name])
                _, v = per_step(run.step_key(), {"x": c[name], "warm": c["warmup"]}, "first")
                x, q = cdf_points(v["x"][v["warm"] == 0] / 1e3)
                keep = positive(x)
                ax.plot(x[keep], q[keep], color=arm.colour, alpha=0.85, label=run_label(arm, i))
                drawn = drawn or bool(keep.any())
        ax.set(title=f"{title} CDF", xlabel="µs per schedule() call", ylabel="fraction of steps",
               ylim=(0, 1.01))
        if drawn:
            ax.set_xscale("log")
        else:  # every step warm-up, or no time above 0
            nothing(ax, "no measured step to draw")
        legend_once(ax, arms)
    return done(fig, "sched_cdf", "sched_call and sched_cpp per arm",
                "Every measured (not warm-up) step of every run, one line per run: sched_call "
                "is the schedule() call seen from Python (binding and GIL reacquire included), "
                "sched_cpp the time inside C++.")
