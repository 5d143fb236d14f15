"""A run's summary as llm-d-benchmark's benchmark report v0.2 (its
benchmark_report/schema_v0_2.py: `BenchmarkReportV02`, dumped as its `dump()` does, fields
left out where they have no value), each value read from the run's summary rows, never
computed again. `steptrace show RUN --export llm-d` prints it (docs/metrics.md, "In
AIPerf's and llm-d's words")."""

from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Tuple

VERSION = "0.2"
# steptrace's stat -> the report's `Statistics` field (p0p1, p1 .. p25, p75, p99p9, mode
# and stddev have no row)
STATS = (("mean", "mean"), ("min", "min"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"),
         ("p99", "p99"), ("max", "max"))
# the report's latency field, its unit, steptrace's metric
LATENCIES = (("time_to_first_token", "s", "ttft"),
             ("time_per_output_token", "s/token", "tpot"),
             ("inter_token_latency", "s/token", "itl"),
             ("request_latency", "s", "e2e"))
THROUGHPUTS = (("output_token_rate", "tokens/s", "output_tokens"),
               ("total_token_rate", "tokens/s", "total_tokens"),
               ("requests_rate", "queries/s", "requests"))


def report(summary: Iterable[dict], run_id: str) -> dict:
    """The report: the run's id and duration, its aggregate request performance."""
    have = {(r["metric"], r["stat"]): float(r["value"]) for r in summary}
    count = lambda *stats: int(sum(have.get(("requests", s), 0.0) for s in stats))
    requests = dict(total=count("finished", "handed_off", "rejected", "unfinished"),
                    failures=count("rejected"), incomplete=count("unfinished"))
    latency = {name: s for name, unit, metric in LATENCIES if (s := _stats(have, metric, unit))}
    throughput = {name: dict(units=unit, mean=have[("throughput", ours)])
                  for name, unit, ours in THROUGHPUTS
                  if not math.isnan(have.get(("throughput", ours), math.nan))}
    run: dict = dict(uid=run_id)
    duration = have.get(("window", "duration"), math.nan)
    if not math.isnan(duration):
        run["time"] = dict(duration=f"PT{duration:.6f}S")  # ISO 8601
    aggregate = dict(requests=requests, latency=latency, throughput=throughput)
    return dict(version=VERSION, run=run,
                results=dict(request_performance=dict(aggregate=aggregate)))


def _stats(have: Dict[Tuple[str, str], float], metric: str, unit: str) -> Dict[str, object]:
    """`metric`'s `Statistics` (its `mean` required): none where it has no samples."""
    if not have.get((metric, "count"), 0):
        return {}
    out: Dict[str, object] = dict(units=unit)
    for ours, theirs in STATS:
        value: Optional[float] = have.get((metric, ours))
        if value is not None and not math.isnan(value):
            out[theirs] = value
    return out if "mean" in out else {}
