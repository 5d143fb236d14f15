"""A run's summary in AIPerf's words: the fields of AIPerf's `profile_export_aiperf.json`
(aiperf 0.13.0: `JsonExportData`, its metrics keyed by their tags, each a
`JsonMetricResult`), each value read from the run's summary rows, never computed again.
`steptrace show RUN --export aiperf` prints it (docs/metrics.md, "In AIPerf's and llm-d's
words")."""

from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Tuple

SCHEMA_VERSION = "1.4"  # JsonExportData.SCHEMA_VERSION of aiperf 0.13.0
# steptrace's stat -> JsonMetricResult's field; AIPerf's p1 .. p75 and std have no row
STATS = (("mean", "avg"), ("min", "min"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"),
         ("p99", "p99"), ("max", "max"), ("count", "count"))
# AIPerf's tag, its display unit, steptrace's metric, the scale from seconds: a distribution
LATENCIES = (("time_to_first_token", "ms", "ttft", 1000.0),
             # AIPerf's ITL is per request, (latency - TTFT) / (OSL - 1): steptrace's TPOT
             ("inter_token_latency", "ms", "tpot", 1000.0),
             ("request_latency", "ms", "e2e", 1000.0))
# AIPerf's tag, its unit, the summary rows it is the sum of: one value (`avg`)
TOTALS: Tuple[Tuple[str, str, Tuple[Tuple[str, str], ...]], ...] = (
    ("request_count", "requests", (("requests", "finished"), ("requests", "handed_off"))),
    ("error_request_count", "requests", (("requests", "rejected"), ("requests", "unfinished"))),
    ("benchmark_duration", "sec", (("window", "duration"),)),
    ("request_throughput", "requests/sec", (("throughput", "requests"),)),
    ("output_token_throughput", "tokens/sec", (("throughput", "output_tokens"),)),
    ("total_isl", "tokens", (("tokens", "input"),)),
    ("total_osl", "tokens", (("tokens", "output"),)),
)


def result(summary: Iterable[dict], complete: bool) -> dict:
    """The profile export: its metrics with a value, and whether the run was complete."""
    have = {(r["metric"], r["stat"]): float(r["value"]) for r in summary}
    out: dict = dict(schema_version=SCHEMA_VERSION, is_complete=bool(complete),
                     was_cancelled=not complete)
    for tag, unit, rows in TOTALS:
        total = sum(have.get(row, math.nan) for row in rows)
        if not math.isnan(total):
            out[tag] = dict(unit=unit, avg=total)
    for tag, unit, metric, scale in LATENCIES:
        stats = _stats(have, metric, scale)
        if stats:
            out[tag] = dict(unit=unit, **stats)
    return out


def _stats(have: Dict[Tuple[str, str], float], metric: str, scale: float) -> Dict[str, float]:
    """The JsonMetricResult fields of `metric`'s rows; none where it has no samples."""
    if not have.get((metric, "count"), 0):
        return {}
    out: Dict[str, float] = {}
    for ours, theirs in STATS:
        value: Optional[float] = have.get((metric, ours))
        if value is not None and not math.isnan(value):
            out[theirs] = int(value) if ours == "count" else value * scale
    return out
