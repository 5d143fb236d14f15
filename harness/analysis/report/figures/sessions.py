"""A session trace's run (docs/workloads.md, "Sessions"): its longest sessions turn by turn,
and the prefix cache's share of each turn's prompt by turn number. From the requests table
(each turn's arrival and last token) and the sessions table; a request trace's run has
neither figure."""

from __future__ import annotations

from typing import List

import numpy as np
from matplotlib import ticker

from .canvas import done, drawable, figure, legend_once, nothing, run_label

LONGEST = 10  # sessions drawn
ROWS = 30  # rows drawn at most: the longest sessions' main rows and their concurrent turns
ROW_IN = 0.17  # a row's height, inches
SPACE = 0.5  # rows between two sessions


def _session_runs(arms):
    return [(arm, i, run) for arm in arms for i, run in enumerate(arm.runs)
            if run.has("sessions")]


def lanes(arrival: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each turn's row within its session, turns in arrival order: the first row whose turns
    have all ended by its arrival. A session's main chain never overlaps itself, so it and
    one sub-agent of each fan-out keep row 0; the sub-agents running beside it take rows
    below."""
    out = np.zeros(len(arrival), np.int64)
    ends: List[float] = []
    for i in np.argsort(arrival, kind="stable"):
        row = next((r for r, e in enumerate(ends) if e <= arrival[i]), len(ends))
        if row == len(ends):
            ends.append(end[i])
        ends[row] = max(ends[row], end[i])
        out[i] = row
    return out


def waterfall(arms):
    """The longest sessions of the first run with a sessions table, a row each: every turn
    a bar from its arrival to its last token, on the session's own time."""
    found = _session_runs(arms)
    if not found:
        return None
    arm, _, run = found[0]
    drawn, height = longest(run)
    fig, axes = figure(height=1.3 + ROW_IN * max(height, 6))
    ax = axes[0][0]
    ax.set(title="longest sessions, turn by turn", xlabel="time since the session's start (s)",
           ylabel="session")
    if not drawn:  # no session ended: a makespan needs a last token
        nothing(ax, "no session with a last token")
    for _, arrival, end, row, unended, top in drawn:
        y = -(top + row)
        main = row == 0
        ax.barh(y[main], (end - arrival)[main], left=arrival[main], height=0.7,
                color=arm.colour, alpha=0.9, linewidth=0)
        ax.barh(y[~main], (end - arrival)[~main], left=arrival[~main], height=0.45,
                color=arm.colour, alpha=0.45, linewidth=0)
        if unended.any():
            ax.plot(arrival[unended], y[unended], "x", color="#c0392b", ms=5)
    if drawn:
        ax.set_yticks([-top for _, _, _, _, _, top in drawn],
                      [str(sid) for sid, *_ in drawn])
        ax.set_ylim(-height + 0.4, 0.6)
        ax.set_xlim(left=0)
        ax.grid(axis="y", visible=False)
    whose = f" of run {run.name}" if len(found) > 1 else ""
    which = {0: "No session ended (none has a last token), so none is drawn: the figure "
                "draws the longest sessions", 1: "The longest session"}.get(
        len(drawn), f"The {len(drawn)} longest sessions")
    return done(fig, "session_waterfall", "Sessions: the longest, turn by turn",
                f"{which}{whose} by makespan (a session's root "
                "arrival to its last token), longest on top, each on its own time from its "
                "start. Each bar is one turn, from its arrival to its last token (its queueing "
                "included): the space before a bar is the think or tool gap the trace gives "
                "the turn after its parent's last token. Where turns of a session ran at once "
                "(sub-agents started together), the first keeps the session's row and the "
                "others take thinner rows of their own beneath it; a cross is a turn that "
                "arrived but has no last token (rejected or unfinished). Times are the run's "
                "clock: on a modeled run the virtual clock, each step timed by the device "
                "model.")


def prefix_hits(arms):
    """Of each turn number's prompt tokens, summed over the sessions, the share the prefix
    cache served; one line per run."""
    found = _session_runs(arms)
    if not found:
        return None
    fig, axes = figure(height=3.0)
    ax = axes[0][0]
    drawn = False
    for arm, i, run in found:
        turn, share = hit_share(run)
        ax.plot(turn, share, "o-", ms=3, color=arm.colour, alpha=0.85, label=run_label(arm, i))
        drawn = drawn or len(turn) > 0
    ax.set(title="prefix hit rate by turn", xlabel="turn number in its session",
           ylabel="prompt tokens hit", ylim=(0, 1.01))
    if drawn:
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    else:
        nothing(ax, "no turn with a prompt")
    legend_once(ax, arms)
    return done(fig, "session_prefix_hits", "Sessions: prefix hit rate by turn",
                "For each turn number (the trace's `turn`: 0 is a session's root in a "
                "generated trace), the prefix-cache hit tokens of every session's turn of that "
                "number over their prompt tokens, as the summary's `session_prefix_hit` sums "
                "them (a turn that was never scheduled hit nothing). A later turn can hit at "
                "most its parent's prompt and output; a root, the shared system prompt. The "
                "hits are the engine's prefix cache as replayed, with the run's KV pool and "
                "eviction.")


def hit_share(run):
    """(turn numbers, hit tokens / prompt tokens of the turns of each) over every turn."""
    c = run.columns("requests", ["turn", "prompt_len", "prefix_hit_tokens"])
    prompt = np.nan_to_num(c["prompt_len"]).astype(np.int64)
    hits = np.maximum(np.nan_to_num(c["prefix_hit_tokens"]), 0).astype(np.int64)
    turn = c["turn"].astype(np.int64)
    numbers, where = np.unique(turn, return_inverse=True)
    total = np.bincount(where, prompt, len(numbers))
    hit = np.bincount(where, hits, len(numbers))
    keep = total > 0
    return numbers[keep], hit[keep] / total[keep]


def longest(run):
    """([(session, its turns' arrivals and ends on its own time, their rows, whether each
    has no last token, the session's first row)], the rows in all, spaces included): the
    longest sessions that fit ROWS, at least one."""
    table = run.columns("sessions", ["session_id", "start_s", "makespan_s"])
    c = run.columns("requests", ["session_id", "arrival_s", "last_token_s"])
    span = drawable(table["makespan_s"])
    order = [int(i) for i in np.argsort(-np.nan_to_num(span, nan=-1.0), kind="stable")
             if np.isfinite(span[i])]
    drawn: List[tuple] = []
    rows = 0
    for i in order[:LONGEST]:
        turns = (c["session_id"] == table["session_id"][i]) & np.isfinite(c["arrival_s"])
        arrival = c["arrival_s"][turns] - table["start_s"][i]
        ended = np.isfinite(c["last_token_s"][turns])
        end = np.where(ended, c["last_token_s"][turns] - table["start_s"][i], arrival)
        row = lanes(arrival, end)
        if drawn and rows + row.max() + 1 > ROWS:
            break
        drawn.append((int(table["session_id"][i]), arrival, end, row, ~ended,
                      rows + SPACE * len(drawn)))
        rows += int(row.max()) + 1
    return drawn, rows + SPACE * (len(drawn) - 1)
