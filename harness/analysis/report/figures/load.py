"""The engine's load over the run: sequences running and waiting, and free KV blocks,
summed over DP ranks (and, in a P/D run, over each pool's instances)."""

from __future__ import annotations

from ....record.run import POOLS
from ..timeline import binned, held_sum, per_step
from .canvas import done, drawable, figure, legend_once, run_label

SERIES = (("running", "running sequences"), ("waiting", "waiting sequences"),
          ("kv_blocks_free", "free KV blocks"))
POOL_STYLES = dict(prefill="--", decode="-")


def steps_over_time(run, names, how="sum"):
    """(time bins, {name: binned per-step value}) of steps-table columns."""
    c = run.columns("steps", ["step", "t_start_s", *names])
    steps, first = per_step(c["step"], {"t": c["t_start_s"]}, "first")
    _, values = per_step(c["step"], {n: c[n] for n in names}, how, run.idle_sums(names))
    return binned(first["t"], values)


def instance_steps(run, role, names, how="sum"):
    """[(instance, step start times, {name: per-step value})] of one pool of a P/D run:
    each instance's steps, its DP ranks' rows summed (or `first`)."""
    c = run.columns("steps", ["t_start_s", *names])
    key, idle = run.step_key(), run.idle_sums(names)
    out = []
    for instance, rows in run.instances(role):
        _, first = per_step(key[rows], {"t": c["t_start_s"][rows]}, "first")
        _, values = per_step(key[rows], {n: c[n][rows] for n in names}, how,
                             {n: v[rows] for n, v in idle.items()})
        out.append((instance, first["t"], values))
    return out


def pool_over_time(run, role, names):
    """(time bins, {name: the pool's value}): summed over the pool's instances, each one's
    value holding between its steps."""
    return held_sum([(t, v) for _, t, v in instance_steps(run, role, names)])


def draw(arms):
    fig, axes = figure(ncols=3, width=10.5, height=2.9)
    names = [n for n, _ in SERIES]
    pools = False
    for arm in arms:
        for i, run in enumerate(arm.runs):
            if not run.disaggregated:
                t, v = steps_over_time(run, names)
                for ax, name in zip(axes[0], names):
                    ax.plot(drawable(t), drawable(v[name]), color=arm.colour, alpha=0.85,
                            label=run_label(arm, i))
                continue
            pools = True
            for role in POOLS:
                t, v = pool_over_time(run, role, names)
                label = (f"{role} pool" if len(arms) == 1 else f"{arm.label}, {role} pool") \
                    if i == 0 else None
                for ax, name in zip(axes[0], names):
                    ax.plot(drawable(t), drawable(v[name]), POOL_STYLES[role],
                            color=arm.colour, alpha=0.85, label=label)
    for ax, (_, title) in zip(axes[0], SERIES):
        ax.set(title=title, xlabel="time (s)")
        ax.set_ylim(bottom=0)
    if pools:
        axes[0][0].legend(loc="best")
    else:
        legend_once(axes[0][0], arms)
    return done(fig, "load", "Requests in flight, waiting queue and free KV blocks",
                "After each step's round, summed over DP ranks; averaged into at most 1,500 "
                "time bins for drawing." + (
                    " A P/D run draws a line per pool, summed over its instances (an "
                    "instance's value holds between its steps); its instances apart are in "
                    "the pools figure." if pools else ""))
