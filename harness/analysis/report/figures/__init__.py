"""The report's figures, one kind per module. Each `draw(arms)` returns a `Drawn` figure, or
None where the runs hold nothing to draw (a device table without power readings)."""

from __future__ import annotations

from . import (
    compute,
    device,
    frontend,
    latency,
    load,
    pools,
    ranks,
    requests,
    sched,
    sessions,
    shapes,
    step_time,
    transfers,
)

# Page order: what a reader asks first (latency), then why (load, a P/D run's pools and
# transfers, batches, time, device), and a session trace's sessions.
RUN_FIGURES = (latency.ttft_tpot, latency.itl, load.draw, pools.draw, transfers.draw,
               shapes.tokens_per_step, step_time.draw, ranks.draw, shapes.heatmap, compute.draw,
               device.draw, requests.draw, sessions.waterfall,
               sessions.prefix_hits)
GIL_FIGURES = (sched.draw, frontend.draw)
# what the engine's steps and batches draw: none for a run against an endpoint, which has
# no engine here
ENGINE_FIGURES = frozenset((load.draw, pools.draw, shapes.tokens_per_step, step_time.draw,
                            ranks.draw, shapes.heatmap, compute.draw))
