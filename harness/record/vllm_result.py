"""A run's summary in the words of vLLM's serving benchmark (`vllm bench serve`,
vllm/benchmarks/serve.py): the block it prints and the fields its `--save-result` JSON
holds, each value read from the run's summary rows, never computed again. `steptrace show
RUN --vllm` prints the block; result.json, beside a run's tables, holds the fields
(docs/metrics.md, "In vLLM's words": each field's summary row, and where vLLM's
definition differs).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from fileio.atomic import atomic_open

from ..schema.manifest import Manifest, view

WIDTH = 50  # vLLM's rules: "=" around the title, "-" around each latency's heading


@dataclass(frozen=True)
class Field:
    name: str  # vLLM's result field
    label: str  # the line vLLM prints for it
    rows: Tuple[Tuple[str, str], ...]  # the summary rows (metric, stat) it is the sum of
    scale: float = 1.0  # 1000: seconds printed in ms
    count: bool = False  # a whole number


def _counts(name: str, label: str, *rows: Tuple[str, str]) -> Field:
    return Field(name, label, rows, count=True)


TOTALS = (
    _counts("completed", "Successful requests:", ("requests", "finished"),
            ("requests", "handed_off")),
    _counts("failed", "Failed requests:", ("requests", "rejected"), ("requests", "unfinished")),
    Field("duration", "Benchmark duration (s):", (("window", "duration"),)),
    _counts("total_input_tokens", "Total input tokens:", ("tokens", "input")),
    _counts("total_output_tokens", "Total generated tokens:", ("tokens", "output")),
    Field("request_throughput", "Request throughput (req/s):", (("throughput", "requests"),)),
    Field("request_goodput", "Request goodput (req/s):", (("goodput", "requests"),)),
    Field("output_throughput", "Output token throughput (tok/s):",
          (("throughput", "output_tokens"),)),
    Field("total_token_throughput", "Total token throughput (tok/s):",
          (("throughput", "total_tokens"),)),
)
# vLLM's name, its heading, steptrace's metric; each as Mean, Median and P99 in ms
LATENCIES = (("ttft", "TTFT", "Time to First Token", "ttft"),
             ("tpot", "TPOT", "Time per Output Token (excl. 1st token)", "tpot"),
             ("itl", "ITL", "Inter-token Latency", "itl"),
             ("e2el", "E2EL", "End-to-end Latency", "e2e"))
STATS = (("mean", "Mean", "mean"), ("median", "Median", "p50"), ("p99", "P99", "p99"))
# Where a figure's definition is not vLLM's (docs/metrics.md, "In vLLM's words").
DIFFERENCES = (
    "duration is the measured window: from the first measured request's intended arrival "
    "to the last token of any measured request, on the run's clock (virtual in a modeled "
    "run), warm-up requests left out; vLLM times the whole benchmark on the client",
    "latencies count from each request's intended arrival (the trace's time), not from when "
    "the request was sent, so a late enqueue is in TTFT and E2EL",
    "ITL is per committed token: tokens committed in one step (MTP) give gaps of 0, where "
    "vLLM measures gaps between streamed chunks",
    "failed counts rejected requests and those unfinished when the run stopped",
    "a statistic with no samples is null, where vLLM writes 0",
    "std_*_ms, max_output_tokens_per_s, max_concurrent_requests and the per-request lists "
    "are not written: the summary has no such rows (the requests table has each request)",
)


def latency_fields() -> List[Tuple[str, Field]]:
    """(heading, field) of each latency statistic, in vLLM's order."""
    return [(heading, Field(f"{stat}_{name}_ms", f"{word} {label} (ms):", ((metric, ours),),
                            scale=1000.0))
            for name, label, heading, metric in LATENCIES for stat, word, ours in STATS]


def fields() -> List[Field]:
    return list(TOTALS) + [f for _, f in latency_fields()]


def values(summary: Iterable[dict]) -> Dict[str, Optional[float]]:
    """Each field's value from the summary rows; None where a row is missing or NaN."""
    have = {(r["metric"], r["stat"]): float(r["value"]) for r in summary}
    out: Dict[str, Optional[float]] = {}
    for f in fields():
        parts = [have.get(row, math.nan) for row in f.rows]
        total = sum(parts) * f.scale
        out[f.name] = None if math.isnan(total) else int(total) if f.count else total
    return out


def block(summary: Iterable[dict]) -> List[str]:
    """The lines vLLM prints, its labels and layout; request goodput only with SLOs."""
    got = values(summary)
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=WIDTH, c="=")]
    lines += [_line(f, got[f.name]) for f in TOTALS
              if f.name != "request_goodput" or got[f.name] is not None]
    heading = None
    for title, f in latency_fields():
        if title != heading:
            lines.append("{s:{c}^{n}}".format(s=title, n=WIDTH, c="-"))
            heading = title
        lines.append(_line(f, got[f.name]))
    return lines + ["=" * WIDTH]


def _line(f: Field, value: Optional[float]) -> str:
    if value is None:
        return "{:<40} {:<10}".format(f.label, "nan")
    return "{:<40} {:<10}".format(f.label, value) if f.count else \
        "{:<40} {:<10.2f}".format(f.label, value)


def result(summary: Iterable[dict], manifest: Manifest) -> dict:
    """result.json: what vLLM's --save-result writes of a run like this, and where each
    value comes from."""
    values_ = manifest.values or {}
    return dict(date=_date(manifest.started), backend="steptrace",
                model_id=values_.get("model"), num_prompts=manifest.trace_rows,
                **values(summary),
                steptrace=dict(complete=bool(manifest.complete),
                               modeled=bool(manifest.modeled),
                               clock=values_.get("clock"),
                               rows={f.name: " + ".join(".".join(r) for r in f.rows)
                                     for f in fields()},
                               differences=list(DIFFERENCES)))


def write(run_dir: Path, summary: Iterable[dict], manifest: dict) -> None:
    """result.json, from the run's manifest as it is written."""
    with atomic_open(Path(run_dir) / "result.json") as f:
        f.write(json.dumps(result(summary, view(manifest)), indent=2, allow_nan=False) + "\n")


def _date(started) -> Optional[str]:
    """vLLM's date format (20261202-134620) from the manifest's ISO start time."""
    text = str(started or "")
    digits = text[:19].replace("-", "").replace(":", "").replace("T", "-")
    return digits if len(digits) == 15 else None
