"""Prompt length against TTFT, one point per request, preempted requests marked."""

from __future__ import annotations

from ..timeline import sample
from .canvas import done, drawable, figure, legend_once, nothing, positive

DRAWN = 20_000  # points drawn per run; every preempted request is drawn too


def draw(arms):
    fig, axes = figure(height=3.4)
    ax = axes[0][0]
    many = drawn = False
    for arm in arms:
        for i, run in enumerate(arm.runs):
            c = run.columns("requests", ["prompt_len", "ttft_s", "preemptions"])
            ttft = drawable(c["ttft_s"] * 1e3)
            ok = positive(ttft) & positive(c["prompt_len"])  # both axes are log
            prompt, ttft, pre = c["prompt_len"][ok], ttft[ok], c["preemptions"][ok] > 0
            idx = sample(len(prompt), DRAWN, pre)
            many, drawn = many or len(idx) < len(prompt), drawn or len(idx) > 0
            p, t, m = prompt[idx], ttft[idx], pre[idx]
            ax.scatter(p[~m], t[~m], s=4, color=arm.colour, alpha=0.35, linewidths=0,
                       label=arm.label if i == 0 and len(arms) > 1 else None)
            if m.any():
                ax.scatter(p[m], t[m], s=22, marker="x", color="#c0392b", linewidths=1.0,
                           label="preempted" if arm is arms[0] and i == 0 else None)
    ax.set(title="prompt length vs TTFT", xlabel="prompt length (tokens)", ylabel="TTFT (ms)")
    if drawn:
        ax.set(xscale="log", yscale="log")
    else:  # every request rejected, or none reached its first token
        nothing(ax, "no request with a first token")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    else:
        legend_once(ax, arms)
    return done(fig, "prompt_vs_ttft", "Prompt length vs TTFT",
                "Every request with a first token"
                + (f" (at most {DRAWN:,} drawn per run, chosen at random, every preempted "
                   "one included)" if many else "")
                + "; a cross marks a request that was preempted at least once.")
