"""A P/D deployment's pools, instance by instance (docs/disaggregation.md): the sequences
each instance runs, the share of its KV blocks in use and the tokens its steps compute, over
the run; and the requests the routers sent it."""

from __future__ import annotations

import numpy as np

from ....record.run import POOLS
from ..timeline import binned
from .canvas import done, drawable, figure
from .load import instance_steps

NAMES = ["running", "kv_blocks_free", "tokens_q"]
LEGEND = 8  # instances a panel names in its legend; more are drawn unnamed
HEADING = 0.32  # inches from a row's top to its heading: the panels' titles between


def draw(arms):
    runs = [(arm, run) for arm in arms for run in arm.runs[:1] if run.disaggregated]
    if not runs:
        return None
    rows = [(arm, run, role) for arm, run in runs for role in POOLS]
    height = 3.2 * len(rows)
    fig, axes = figure(ncols=4, nrows=len(rows), width=13.0, height=height)
    fig.subplots_adjust(top=1 - 0.65 / height)  # room for the first row's heading
    for row, (arm, run, role) in zip(axes, rows):
        _draw_pool(row, run, role)
        # the row's heading above its panels' titles, as wide as the figure: an arm's label
        # in each panel's title ran into the next panel's
        top = row[0].get_position()
        fig.text(top.x0, top.y1 + HEADING / height, f"{arm.label}: {role} pool"
                 if len(runs) > 1 else f"{role} pool", fontsize=10.5, fontweight="bold",
                 va="bottom")
    return done(fig, "pools", "P/D pools: each instance's load and the requests routed to it",
                "A row per pool (the first P/D run of each arm), a line per instance, its "
                "DP ranks summed at each step and averaged into at most 1,500 time bins: "
                "the sequences it runs (a decode instance's include those whose KV is in "
                "transfer: their blocks are reserved), its KV blocks in use (the pool's "
                "blocks per DP rank x its ranks, less the free ones; blocks the prefix cache "
                "only retains count as free) and the tokens its steps compute. Right: the "
                "requests the pool's router sent each instance.")


def _draw_pool(axes, run, role: str) -> None:
    running_ax, kv_ax, tokens_ax, routed_ax = axes
    per_rank, ranks = run.pool_key(role, "engine.num_kv_blocks"), \
        run.pool_key(role, "engine.dp_size")
    blocks = per_rank * ranks if isinstance(per_rank, int) and isinstance(ranks, int) \
        and per_rank * ranks > 0 else None
    steps = instance_steps(run, role, NAMES)
    for instance, t, v in steps:
        tb, b = binned(t, v)
        label = f"{role} {instance}" if len(steps) <= LEGEND else None
        colour = f"C{instance % 10}"
        running_ax.plot(drawable(tb), drawable(b["running"]), color=colour, label=label)
        in_use = 100 * (1 - b["kv_blocks_free"] / blocks) if blocks else b["kv_blocks_free"]
        kv_ax.plot(drawable(tb), drawable(in_use), color=colour, label=label)
        tokens_ax.plot(drawable(tb), drawable(b["tokens_q"]), color=colour, label=label)
    running_ax.set(title="running sequences", xlabel="time (s)")
    if blocks:
        kv_ax.set(title="KV blocks in use", xlabel="time (s)",
                  ylabel=f"% of {blocks:,} blocks")
    else:  # a pool whose block count the manifest does not hold
        kv_ax.set(title="free KV blocks", xlabel="time (s)")
    tokens_ax.set(title="tokens per step", xlabel="time (s)",
                  ylabel="seqlen_q summed (mean)")
    for ax in (running_ax, kv_ax, tokens_ax):
        ax.set_ylim(bottom=0)
    if running_ax.get_legend_handles_labels()[0] and len(steps) > 1:
        running_ax.legend(loc="best")
    _routed(routed_ax, run, role)


def _routed(ax, run, role: str) -> None:
    """Requests per instance of the pool, as its router sent them (the requests table's
    prefill_instance / decode_instance; a request no decode instance took has none)."""
    column = f"{role}_instance"
    sent = run.columns("requests", [column])[column]
    sent = sent[np.isfinite(sent)].astype(np.int64)
    instances = max(int(run.pool_key(role, "instances") or 0),
                    int(sent.max()) + 1 if len(sent) else 0)
    counts = np.bincount(sent, minlength=instances)
    bars = ax.bar(np.arange(instances), counts,
                  color=[f"C{i % 10}" for i in range(instances)])
    if instances <= 16:
        ax.bar_label(bars, labels=[f"{n:,}" for n in counts], fontsize=8)
        ax.set_xticks(np.arange(instances))
    ax.set(title="requests routed", xlabel=f"{role} instance", ylabel="requests")
    ax.set_ylim(0, max(int(counts.max()) if len(counts) else 0, 1) * 1.18)
