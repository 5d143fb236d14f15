"""Achieved TFLOP/s per device over time, with MFU on the same curve's second axis."""

from __future__ import annotations

import math

from ..timeline import binned, per_step
from .canvas import done, drawable, figure, legend_once, positive, run_label

RATE_BINS = 200  # a rate over a bin of a few steps is mostly noise


def draw(arms):
    fig, axes = figure(height=3.0)
    ax = axes[0][0]
    peaks = set()
    for arm in arms:
        for i, run in enumerate(arm.runs):
            c = run.columns("steps", ["t_start_s", "t_end_s", "model_flops"])
            key = run.step_key()  # a P/D run's instances number their own steps
            _, t = per_step(key, {"start": c["t_start_s"], "end": c["t_end_s"]}, "first")
            _, f = per_step(key, {"flops": c["model_flops"]})
            centres, total = binned(t["end"], {"flops": f["flops"]}, bins=RATE_BINS,
                                   reduce="sum")
            width = (centres[1] - centres[0]) if len(centres) > 1 else \
                max(float(t["end"].max() - t["start"].min()), 1e-9)
            tflops = total["flops"] / (width * run.devices * 1e12)
            ax.plot(drawable(centres), drawable(tflops), color=arm.colour, alpha=0.85,
                    label=run_label(arm, i))
            mfu = run.stat("mfu", "model")
            peak = run.stat("achieved", "tflops_per_device") / mfu if mfu > 0 else math.nan
            if positive(peak):  # a finite peak above 0: one a second axis can scale by
                peaks.add(float(peak))
    ax.set(title="achieved TFLOP/s per device", xlabel="time (s)", ylabel="TFLOP/s")
    ax.set_ylim(bottom=0)
    if len(peaks) == 1:  # one peak: MFU is the same curve on a second scale
        peak = peaks.pop()
        right = ax.secondary_yaxis("right", functions=(lambda x: x / peak * 100,
                                                       lambda m: m * peak / 100))
        right.set_ylabel(f"MFU (% of {peak:,.0f} TFLOP/s)")
    legend_once(ax, arms)
    return done(fig, "compute", "Achieved TFLOP/s and MFU over time",
                "Model FLOPs (the work the steps needed) committed in each time bin, per "
                "device; MFU is that over the device's dense peak at the workload's "
                "precision (docs/metrics.md), in 200 time bins. Where the arms' peaks differ, "
                "see the summary table." + (
                    " A P/D run's line is every instance's FLOPs over the devices of both "
                    "pools; each pool's MFU is in the summary (prefill_mfu, decode_mfu)."
                    if any(r.disaggregated for a in arms for r in a.runs) else ""))
