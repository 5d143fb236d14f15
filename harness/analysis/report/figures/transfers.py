"""A P/D run's KV transfers, request by request (docs/disaggregation.md): the time from the
hand-off to the KV's arrival (what the transfer adds to TTFT) and the wait for decode room,
over the requests' arrival, and their distributions."""

from __future__ import annotations

import numpy as np

from ..timeline import cdf_points, sample
from .canvas import done, drawable, figure, nothing, positive

DRAWN = 20_000  # points drawn per series and run
COLUMNS = ["arrival_s", "handoff_s", "transfer_end_s", "decode_wait_s"]
SERIES = (("kv_transfer", "hand-off to KV arrival", "#1f6fb2"),
          ("decode_wait", "decode wait", "#e4572e"))


def draw(arms):
    runs = [(arm, run) for arm in arms for run in arm.runs[:1] if run.disaggregated]
    if not runs:
        return None
    fig, axes = figure(ncols=2, nrows=len(runs), width=10.5, height=3.2 * len(runs))
    many = False
    for (over_time, cdf), (arm, run) in zip(axes, runs):
        prefix = f"{arm.label}: " if len(runs) > 1 else ""
        many = _draw_run(over_time, cdf, prefix, run) or many
    return done(fig, "kv_transfer", "P/D: KV transfers and the wait for decode room",
                "Per request (the first P/D run of each arm, warm-up requests included): "
                "from the prefill's hand-off (its first token) to the KV's arrival at the "
                "decode instance, the `kv_transfer` the summary describes (what the transfer "
                "adds to TTFT: a layerwise transfer hides most of itself under the prefill "
                "step), and `decode_wait_s`, from the prefill's request for decode room to "
                "the transfer's start (the decode instance's step in flight, then "
                "backpressure). Left: against the request's arrival"
                + (f", at most {DRAWN:,} points per series chosen at random" if many else "")
                + ". Right: their CDFs over every request; a time of 0 has no place on the "
                "log axes, so a CDF starts at the share of requests that took 0.",
                decades=[a for row in axes for ax in row for a in (ax.xaxis, ax.yaxis)])


def _draw_run(over_time, cdf, prefix: str, run) -> bool:
    """Both panels of one run; whether a series had more points than are drawn."""
    c = run.columns("requests", COLUMNS)
    values = dict(kv_transfer=c["transfer_end_s"] - c["handoff_s"],
                  decode_wait=c["decode_wait_s"])
    many = drawn = False
    for key, label, colour in SERIES:
        v = np.asarray(values[key], np.float64)
        measured = np.isfinite(v)  # a request whose KV never arrived has none
        ms = drawable(v * 1e3)
        ok = positive(ms) & np.isfinite(drawable(c["arrival_s"]))  # ms on a log axis
        idx = sample(int(ok.sum()), DRAWN)
        many = many or len(idx) < int(ok.sum())
        over_time.scatter(drawable(c["arrival_s"][ok][idx]), ms[ok][idx], s=4, color=colour,
                          alpha=0.35, linewidths=0)
        x, q = cdf_points(v[measured] * 1e3)
        keep = positive(x)
        zeros = int((v[measured] == 0).sum())
        cdf.plot(x[keep], q[keep], color=colour, label=f"{label} ({int(measured.sum()):,} "
                 f"requests{f', {zeros:,} at 0' if zeros else ''})")
        drawn = drawn or bool(keep.any())
    over_time.set(title=f"{prefix}per request, over its arrival", xlabel="arrival (s)",
                  ylabel="ms")
    cdf.set(title=f"{prefix}CDFs", xlabel="ms", ylabel="fraction of requests", ylim=(0, 1.01))
    if drawn:
        over_time.set_yscale("log")
        cdf.set_xscale("log")
        cdf.legend(loc="lower right")  # the scatter's colours too
    else:  # no request reached the decode pool, or every time was 0
        for ax in (over_time, cdf):
            nothing(ax, "no KV transfer with a time above 0")
    return many
