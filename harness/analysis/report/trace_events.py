"""A run's steps as Chrome trace-event JSON (Perfetto, chrome://tracing): one process per DP
rank (a P/D run's: per instance and DP rank), each step a span with its schedule / forward /
postprocess inside it, and counter tracks for the batch's tokens, running and waiting
sequences and free KV blocks.

Times are µs on the run's clock. Spans on one track start in step order and children lie
inside their step (the trace-event format nests X events by containment). A counter holds
its value until its next event, so one is written only where its value changes.
"""

from __future__ import annotations

import json
from typing import Dict, Tuple

import numpy as np

from ...io.atomic import atomic_open
from ..runs import POOLS

COUNTERS = (("tokens_q", "batch tokens"), ("running", "running"), ("waiting", "waiting"),
            ("kv_blocks_free", "free KV blocks"))
NAMES = ["step", "dp_rank", "phase", "t_start_s", "t_end_s", "sched_call_ns", "forward_ns",
         "sample_ns", "postprocess_ns", *[c for c, _ in COUNTERS]]


def events(run):
    """The trace's events, in the order they are written (a generator: an hour's run has
    millions)."""
    c = run.columns("steps", NAMES)
    track, names = _tracks(run, c["dp_rank"])
    order = np.lexsort((c["step"], track))
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
        for name, values in counters.items():
            value = int(values[i])
            if last.get((pid, name)) != value:
                last[(pid, name)] = value
                yield dict(ph="C", name=name, pid=pid, ts=s, args={name: value})


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
