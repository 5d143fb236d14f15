"""Where a step's time goes: schedule, forward (sampling included), postprocess, and the
rest of the engine loop."""

from __future__ import annotations

import numpy as np

from ....record.run import POOLS
from ..timeline import binned, per_step
from .canvas import done, drawable, figure, nothing, positive

PARTS = (("sched_call_ns", "schedule", "#1f6fb2"), ("forward", "forward + sample", "#2a9d5c"),
         ("postprocess_ns", "postprocess", "#e4572e"), ("other", "rest of the loop", "#b8c0c8"))


def draw(arms):
    # a row per arm's first run; a P/D run's a row per pool, its steps being of two kinds
    rows = [(arm, role) for arm in arms
            for role in (POOLS if arm.runs[0].disaggregated else (None,))]
    fig, axes = figure(ncols=2, nrows=len(rows), width=10.5, height=2.9 * len(rows))
    for (ax, host), (arm, role) in zip(axes, rows):
        run = arm.runs[0]
        names = ["sched_call_ns", "forward_ns", "sample_ns", "postprocess_ns", "step_ns"]
        c = run.columns("steps", ["t_start_s", *names])
        key = run.step_key()
        if role is not None:  # the pool's rows
            keep = run.columns("steps", ["role"])["role"] == role
            c, key = {n: x[keep] for n, x in c.items()}, key[keep]
        _, v = per_step(key, {"t": c["t_start_s"], **{n: c[n] for n in names}}, "first")
        parts = {"sched_call_ns": v["sched_call_ns"],
                 "forward": v["forward_ns"] + v["sample_ns"],
                 "postprocess_ns": v["postprocess_ns"]}
        parts["other"] = np.maximum(v["step_ns"] - sum(parts.values()), 0)
        t, b = binned(v["t"], parts)
        t, b = drawable(t), {k: drawable(x / 1e3) for k, x in b.items()}
        ax.stackplot(t, *[b[k] for k, _, _ in PARTS], labels=[lbl for _, lbl, _ in PARTS],
                     colors=[c for _, _, c in PARTS], alpha=0.9)
        for key, label, colour in PARTS:
            if key != "forward":
                host.plot(t, b[key], color=colour, label=label)
        prefix = ", ".join(([arm.label] if len(arms) > 1 else [])
                           + ([f"{role} pool"] if role else []))
        prefix = f"{prefix}: " if prefix else ""
        ax.set(title=f"{prefix}whole step", xlabel="time (s)", ylabel="µs per step (mean)")
        host.set(title=f"{prefix}host side, without the forward", xlabel="time (s)",
                 ylabel="µs per step (mean)")
        if any(positive(b[k]).any() for k, _, _ in PARTS if k != "forward"):
            host.set_yscale("log")
        else:  # a run whose host timings are all 0
            nothing(host, "no host time above 0 to draw")
        ax.set_ylim(bottom=0)
    axes[0][0].legend(loc="lower center", ncol=2)
    axes[0][1].legend(loc="best")
    modeled = any(r.modeled for a in arms for r in a.runs)
    return done(fig, "step_time", "Step duration: schedule, forward, postprocess",
                "Each step's schedule() call, forward and sampling, and postprocess(), "
                "stacked (left) and, without the forward, on a log scale (right); the rest is the "
                "engine loop around them. Averaged into at most "
                "1,500 time bins" + ("; a modeled run's forward is the device model's time"
                                     if modeled else "")
                + ("; a P/D run's pools apart, each over its instances' steps"
                   if any(role for _, role in rows) else "") + ".")
