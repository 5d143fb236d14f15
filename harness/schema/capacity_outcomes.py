"""A capacity search's outcomes that name no capacity (docs/capacity.md, "The search"): a
point that ran such a search is shown as its outcome, not as done, wherever its row is
read (the sweep's text, its page and summary.md), and is on no Pareto front. `at_least`
is not one of them: its rate is a capacity's lower bound (every rate probed met the
target), an answer, shown as that bound (LOWER_BOUND)."""

NOT_A_CAPACITY = {
    "none": "no capacity: even the lowest rate probed missed the target",
    "probe_limit": "no capacity: the search ran out of probes before its bracket reached "
                   "the resolution",
    "trace_too_short": "no capacity: the answer misses the target on a trace twice as long, "
                       "or the run at it reached no steady state (it depends on the trace's "
                       "length: lengthen the trace)",
}
LOWER_BOUND = {
    "at_least": "a lower bound: every rate probed met the target, up to the highest; the "
                "capacity is at least this rate",
}
