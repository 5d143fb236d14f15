"""Prompt length against TTFT, one point per request, preempted requests marked."""

from __future__ import annotations

import numpy as np

from ..timeline import sample
from .canvas import done, figure, legend_once

DRAWN = 20_000  # points drawn per run; every preempted request is drawn too


def draw(arms):
    fig, axes = figure(height=3.4)
    ax = axes[0][0]
    many = False
    for arm in arms:
        for i, run in enumerate(arm.runs):
            c = run.columns("requests", ["prompt_len", "ttft_s", "preemptions"])
            ok = np.isfinite(c["ttft_s"])
            prompt, ttft, pre = c["prompt_len"][ok], c["ttft_s"][ok], c["preemptions"][ok] > 0
            idx = sample(len(prompt), DRAWN, pre)
            many |= len(idx) < len(prompt)
            p, t, m = prompt[idx], ttft[idx] * 1e3, pre[idx]
            ax.scatter(p[~m], t[~m], s=4, color=arm.colour, alpha=0.35, linewidths=0,
                       label=arm.label if i == 0 and len(arms) > 1 else None)
            if m.any():
                ax.scatter(p[m], t[m], s=22, marker="x", color="#c0392b", linewidths=1.0,
                           label="preempted" if arm is arms[0] and i == 0 else None)
    ax.set(title="prompt length vs TTFT", xscale="log", yscale="log",
           xlabel="prompt length (tokens)", ylabel="TTFT (ms)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    else:
        legend_once(ax, arms)
    return done(fig, "prompt_vs_ttft", "Prompt length vs TTFT",
                "Every request with a first token"
                + (f" (at most {DRAWN:,} drawn per run, chosen at random, every preempted "
                   "one included)" if many else "")
                + "; a cross marks a request that was preempted at least once.")
