"""What each step computes: tokens and sequences per step by phase, and the shape of every
scheduled row (seqlen_q x seqlen_k)."""

from __future__ import annotations

import numpy as np

from ....schema.values import PHASES
from ..timeline import binned, per_step
from .canvas import done, drawable, figure, nothing

EDGES = 2.0 ** np.arange(0, 25)  # power-of-two bins: 1 token up to 16M
COLOURS = dict(prompt="#e4572e", decode="#1f6fb2")  # by phase


def tokens_per_step(arms):
    fig, axes = figure(ncols=2, width=10.5, height=3.0)
    styles = ("-", "--", ":", "-.")
    for a, arm in enumerate(arms):
        run = arm.runs[0]
        c = run.columns("steps", ["t_start_s", "phase", "tokens_q", "num_seqs"])
        key = run.step_key()  # a P/D run's instances number their own steps
        steps, first = per_step(key, {"t": c["t_start_s"]}, "first")
        _, summed = per_step(key, {"tokens_q": c["tokens_q"], "num_seqs": c["num_seqs"]})
        _, phase_first = np.unique(key, return_index=True)
        phase = c["phase"][phase_first]
        for name in reversed(PHASES):  # prompt first, decode drawn over it
            colour, keep = COLOURS[name], phase == name
            if not keep.any():
                continue
            t, v = binned(first["t"][keep], {k: s[keep] for k, s in summed.items()}, bins=500)
            label = name if len(arms) == 1 else f"{name}, {arm.label}"
            for ax, key in zip(axes[0], ("tokens_q", "num_seqs")):
                ax.plot(drawable(t), drawable(v[key]), styles[a % len(styles)], color=colour,
                        alpha=0.85, label=label)
    axes[0][0].set(title="tokens per step", xlabel="time (s)", ylabel="seqlen_q summed")
    axes[0][1].set(title="sequences per step", xlabel="time (s)", ylabel="sequences")
    for ax in axes[0]:
        ax.set_yscale("symlog", linthresh=1.0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
        else:  # no step of either phase
            nothing(ax, "no prompt or decode step")
    return done(fig, "tokens_per_step", "Tokens and sequences per step, by phase",
                "Summed over DP ranks, averaged per phase into at most 500 time bins"
                + ("" if len(arms) == 1 else "; the first run of each arm")
                + ("; a P/D run's every instance's steps, its prompt steps the prefill "
                   "pool's and its decode steps the decode pool's" if any(
                       a.runs[0].disaggregated for a in arms) else "") + ".")


def heatmap(arms):
    fig, axes = figure(ncols=len(arms), width=min(4.2 * len(arms) + 1.0, 12.0), height=3.4)
    image = None
    for ax, arm in zip(axes[0], arms):
        grid = np.zeros((len(EDGES) - 1, len(EDGES) - 1))
        for run in arm.runs:
            c = run.columns("batches", ["seqlen_q", "seqlen_k"])
            grid += np.histogram2d(c["seqlen_q"], c["seqlen_k"], bins=(EDGES, EDGES))[0]
        if grid.sum() == 0:
            continue
        nq, nk = (int(np.flatnonzero(grid.any(axis=a)).max()) + 2 for a in (1, 0))
        image = ax.pcolormesh(EDGES[:nk], EDGES[:nq], np.ma.masked_equal(
            grid[:nq - 1, :nk - 1], 0), cmap="viridis", norm="log", shading="flat")
        ax.set(xscale="log", yscale="log", xlabel="seqlen_k (tokens)",
               ylabel="seqlen_q (tokens)", title=arm.label if len(arms) > 1 else "")
        ax.grid(False)
    if image is None:
        return None
    fig.colorbar(image, ax=axes[0].tolist(), label="batch rows", shrink=0.9)
    return done(fig, "batch_shapes", "Batch shapes: seqlen_q x seqlen_k",
                "Every scheduled row of the batches table (all steps, all ranks), counted "
                "in power-of-two bins; decode rows lie along the bottom, prefill chunks "
                "above.")
