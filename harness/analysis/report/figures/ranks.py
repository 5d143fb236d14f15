"""DP attention's tax: which ranks the steps wait for, and what those ranks ran
(docs/metrics.md, "DP imbalance"). Modeled runs of more than one DP rank only."""

from __future__ import annotations

import numpy as np

from ....record.run import POOLS
from ..timeline import binned
from .canvas import done, drawable, figure

COLUMNS = ("dp_rank", "t_start_s", "rank_s", "tokens_q", "sum_seqlen_k")
ROUNDS = (("prompt", "prompt round", "#e4572e"), ("decode", "decode round", "#1f6fb2"))


def draw(arms):
    # a row per arm's first run; a P/D run's a row per pool with DP ranks
    runs = [(arm, run, role) for arm in arms for run in arm.runs[:1] for role in _ranked(run)]
    if not runs:
        return None
    fig, axes = figure(ncols=3, nrows=len(runs), width=12, height=3.1 * len(runs))
    for row, (arm, run, role) in zip(axes, runs):
        if role is None:
            label = arm.label if len(runs) > 1 else ""
        else:
            label = f"{arm.label}, {role} pool" if len(arms) > 1 else f"{role} pool"
        _draw_run(row, label, _by_step(run, role))
    axes[0][1].legend(loc="best")
    return done(fig, "ranks", "DP ranks: who the step waits for",
                "A step lasts as long as its slowest DP rank; `rank_s` is each rank's own "
                "modeled time. Left: the slowest rank's time over the mean rank's (the mean "
                "over each of at most 1,500 time bins). Middle: the rank-time "
                "lost waiting, by the rank waited for and the round it ran. Right: what the "
                "slowest rank ran against the mean of the ranks, over the steps, weighted by "
                "the time each step lost." + (
                    " A P/D run has a row per pool, over its instances' steps."
                    if any(role for _, _, role in runs) else ""))


def _ranked(run) -> list:
    """[None] for a run whose steps have modeled rank times (its summary has the imbalance
    rows) on more than one DP rank; for a P/D run, each pool that has them (its summary's
    `prefill_dp_imbalance` ...); [] otherwise."""
    if not run.has("steps"):
        return []
    if not run.disaggregated:
        if not np.isfinite(run.stat("dp_imbalance", "lost_share")):
            return []
        return [None] if _by_step(run)["ranks"].max() > 1 else []
    c = run.columns("steps", ["role"])
    return [role for role in POOLS if np.isfinite(run.stat(f"{role}_dp_imbalance",
                                                           "lost_share"))
            and (c["role"] == role).any() and _by_step(run, role)["ranks"].max() > 1]


def _by_step(run, role=None):
    """The steps table (a P/D run's: one pool's, its instances' steps one after another) as
    one value per step: its start, phase and DP ranks; its slowest and mean rank_s over all
    its ranks; the rank it waited for (`who`: the first of its rows with the slowest
    rank_s, which the recorder always writes) and that rank's tokens_q and sum_seqlen_k;
    tokens_q and sum_seqlen_k summed over its ranks (an idle rank's, left out, are 0). A
    steps table from before the rank aggregates has a row per rank: they are computed."""
    names = [*COLUMNS, "phase"]
    aggregates = {"slowest_rank_s", "mean_rank_s", "idle_ranks"} <= set(run.run.columns("steps"))
    if aggregates:
        names += ["slowest_rank_s", "mean_rank_s", "idle_ranks"]
    c = run.columns("steps", names)
    key = run.step_key()
    if role is not None:
        rows = np.flatnonzero(run.columns("steps", ["role"])["role"] == role)
        rows = rows[np.lexsort((c["dp_rank"][rows], key[rows]))]
        c, key = {k: v[rows] for k, v in c.items()}, key[rows]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    written = np.diff(np.r_[starts, len(key)])
    rank_s = np.asarray(c["rank_s"], np.float64)
    most = np.maximum.reduceat(rank_s, starts)
    if aggregates:
        slowest, mean = c["slowest_rank_s"][starts], c["mean_rank_s"][starts]
        ranks = written + c["idle_ranks"][starts].astype(np.int64)
    else:
        slowest, mean, ranks = most, np.add.reduceat(rank_s, starts) / written, written
    step = np.repeat(np.arange(len(starts)), written)
    top = np.flatnonzero(rank_s == most[step])  # rows holding their step's largest rank_s
    who = top[np.unique(step[top], return_index=True)[1]]  # the first of each step's
    out = dict(t_start_s=c["t_start_s"][starts], phase=c["phase"][starts], ranks=ranks,
               slowest=slowest, mean=mean, who=c["dp_rank"][who].astype(np.int64))
    for column in ("tokens_q", "sum_seqlen_k"):
        v = np.asarray(c[column], np.float64)
        out[column], out[f"who_{column}"] = np.add.reduceat(v, starts), v[who]
    return out


def _draw_run(axes, label: str, s) -> None:
    ratio_ax, lost_ax, why_ax = axes
    slowest, mean = s["slowest"], s["mean"]
    timed = mean > 0
    ratio = np.where(timed, slowest / np.where(timed, mean, 1), np.nan)
    t, b = binned(s["t_start_s"], {"ratio": ratio})
    ratio_ax.plot(drawable(t), drawable(b["ratio"]))
    prefix = f"{label}: " if label else ""
    ratio_ax.set(title=f"{prefix}slowest over mean rank", xlabel="time (s)",
                 ylabel="max / mean rank_s")
    lost = (slowest - mean) * s["ranks"]  # rank-seconds spent waiting, per step
    ranks = np.arange(int(s["ranks"].max()))
    bottom = np.zeros(len(ranks))
    for phase, name, colour in ROUNDS:
        here = s["phase"] == phase
        share = np.bincount(s["who"][here], weights=lost[here], minlength=len(ranks)) / max(
            lost.sum(), 1e-300)
        lost_ax.bar(ranks, share, bottom=bottom, color=colour, label=name)
        bottom += share
    lost_ax.set(title="time lost, by the rank waited for", xlabel="DP rank",
                ylabel="share of lost rank-time")
    lost_ax.set_ylim(0, max(bottom.max(), 1e-9) * 1.35)  # room for the legend
    _why(why_ax, s, lost)


def _why(ax, s, lost) -> None:
    """The slowest rank's tokens and attended keys over the ranks' mean, weighted by the
    time each step lost."""
    weight = lost / lost.sum() if lost.sum() > 0 else np.full(len(lost), 1 / len(lost))
    names, values = [], []
    for column, name in (("tokens_q", "tokens"), ("sum_seqlen_k", "keys attended")):
        mean = s[column] / s["ranks"]  # over every rank, idle ones included
        names.append(name)
        values.append(float((weight * s[f"who_{column}"]).sum()) /
                      max(float((weight * mean).sum()), 1e-300))
    ax.bar(names, drawable(values), color="#6c757d")
    ax.axhline(1.0, color="#333", linewidth=0.8)
    ax.set(title="slowest rank over the mean rank", ylabel="ratio (1: the same)")
