"""A run's steps as Chrome trace-event JSON (Perfetto, chrome://tracing): one process per DP
rank (a P/D run's: per instance and DP rank), each step a span with its schedule / forward /
postprocess inside it, and counter tracks for the batch's tokens, running and waiting
sequences and free KV blocks.

Times are µs on the run's clock. Spans on one track start in step order and children lie
inside their step (the trace-event format nests X events by containment). A counter holds
its value until its next event, so one is written only where its value changes. An idle
rank's step has no row (docs/tables.md, "steps"), so no span: where a rank's row is
followed by a step it has none in, its counters go to an idle rank's values at that step's
start (0 tokens, running and waiting; free blocks the step's idle ranks' mean).
"""

from __future__ import annotations

import json
from typing import Dict, Tuple

import numpy as np

from fileio.atomic import atomic_open

from ...record.run import POOLS

COUNTERS = (("tokens_q", "batch tokens"), ("running", "running"), ("waiting", "waiting"),
            ("kv_blocks_free", "free KV blocks"))
NAMES = ["step", "dp_rank", "phase", "t_start_s", "t_end_s", "sched_call_ns", "forward_ns",
         "sample_ns", "postprocess_ns", *[c for c, _ in COUNTERS]]
IDLE = ["idle_ranks", "idle_kv_blocks_free"]  # a steps table from before them: every row


def events(run):
    """The trace's events, in the order they are written (a generator: an hour's run has
    millions)."""
    sparse = set(IDLE) <= set(run.run.columns("steps"))
    c = run.columns("steps", NAMES + (IDLE if sparse else []))
    track, names = _tracks(run, c["dp_rank"])
    order = np.lexsort((c["step"], track))
    idle_ts, idle_free = _idle_after(run, c, track[order], order) if sparse and len(order) \
        else (np.full(len(order), np.nan), np.zeros(len(order)))
    # a time past the largest double in µs is inf: its step cannot be placed and is left
    # out (JSON has no infinity)
    with np.errstate(over="ignore", invalid="ignore"):
        start = c["t_start_s"][order] * 1e6
        end = np.maximum(c["t_end_s"][order] * 1e6, start)
        placed = np.isfinite(start) & np.isfinite(end - start)
        sched = np.minimum(c["sched_call_ns"][order] / 1e3, end - start)
        post = np.minimum(c["postprocess_ns"][order] / 1e3, end - start - sched)
        fwd_start = start + sched
        fwd = np.minimum((c["forward_ns"][order] + c["sample_ns"][order]) / 1e3,
                         end - post - fwd_start)
    rank, step, phase = track[order], c["step"][order], c["phase"][order]
    counters = {name: c[col][order] for col, name in COUNTERS}
    for r in np.unique(rank):
        yield dict(ph="M", name="process_name", pid=int(r), tid=0, args=dict(name=names[r]))
    last: Dict[Tuple[int, str], int] = {}  # (pid, counter) -> the value last drawn
    for i in np.flatnonzero(placed):
        pid = int(rank[i])
        s, e = float(start[i]), float(end[i])
        yield dict(ph="X", name=f"{phase[i]} step", cat="step", pid=pid, tid=0, ts=s,
                   dur=e - s, args=dict(step=int(step[i])))
        for name, ts, dur in (("schedule", s, sched[i]), ("forward", fwd_start[i], fwd[i]),
                              ("postprocess", e - post[i], post[i])):
            if dur > 0:
                yield dict(ph="X", name=name, cat="step", pid=pid, tid=0, ts=float(ts),
                           dur=float(dur))
        yield from _counters(last, pid, s, {name: int(v[i]) for name, v in counters.items()})
        if np.isfinite(idle_ts[i]):
            yield from _counters(last, pid, float(idle_ts[i]), dict(zip(
                counters, (0, 0, 0, int(idle_free[i])))))


def _counters(last: Dict[Tuple[int, str], int], pid: int, ts: float, values: Dict[str, int]):
    """A counter event for each value that differs from the one last drawn on its track."""
    for name, value in values.items():
        if last.get((pid, name)) != value:
            last[(pid, name)] = value
            yield dict(ph="C", name=name, pid=pid, ts=ts, args={name: value})


def _idle_after(run, c, track, order):
    """(ts, free blocks) per sorted row: where its rank has no row in its instance's next
    step, that step's start and its idle ranks' mean free blocks (the rank's counters as an
    idle rank's); NaN ts elsewhere."""
    key = run.step_key()
    keys, first = np.unique(key, return_index=True)
    sorted_key = key[order]
    nxt = sorted_key + 1  # the same instance's next step, if it has one (run_data.step_key)
    at = np.minimum(np.searchsorted(keys, nxt), len(keys) - 1)
    row = first[at]  # the next step's first row: its start and idle ranks
    followed = np.r_[(track[1:] == track[:-1]) & (sorted_key[1:] == nxt[:-1]), False]
    idle = (keys[at] == nxt) & (c["step"][order] < c["step"].max()) & ~followed \
        & (c["idle_ranks"][row] > 0)
    with np.errstate(over="ignore", invalid="ignore"):
        ts = np.where(idle, c["t_start_s"][row] * 1e6, np.nan)
        free = np.round(c["idle_kv_blocks_free"][row] / np.maximum(c["idle_ranks"][row], 1))
    return ts, free


def _tracks(run, dp_rank):
    """(per row, its process id; {process id: its name}): the DP rank ("DP rank 3"); in a
    P/D run, whose instances each have DP ranks of their own, one per instance and rank,
    the prefill pool's first ("prefill 1, DP rank 3")."""
    if not run.disaggregated:
        return dp_rank, {int(r): f"DP rank {int(r)}" for r in np.unique(dp_rank)}
    c = run.columns("steps", ["role", "instance"])
    ranks = int(dp_rank.max()) + 1 if len(dp_rank) else 1
    instances = int(c["instance"].max()) + 1 if len(dp_rank) else 1
    pool = (c["role"] != POOLS[0]).astype(np.int64)
    track = (pool * instances + c["instance"]) * ranks + dp_rank
    return track, {int(t): f"{POOLS[t // ranks // instances]} {t // ranks % instances}, "
                           f"DP rank {t % ranks}" for t in np.unique(track)}


def write(run, path) -> None:
    with atomic_open(path) as f:
        f.write('{"displayTimeUnit": "ms", "otherData": ')
        f.write(json.dumps(dict(run=run.name, modeled=run.modeled, device=run.device)))
        f.write(', "traceEvents": [\n')
        separator = ""
        for event in events(run):
            f.write(separator + json.dumps(event, separators=(",", ":")))
            separator = ",\n"
        f.write("\n]}\n")
