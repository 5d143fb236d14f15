"""The requests table, the engine's summary rows, and manifest.json (docs/metrics.md
defines every column; the recorder streams the steps and batches tables).

The manifest is written to a temporary name and renamed into place, as every table is; it
says `complete: false` until the run ended cleanly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from . import metrics


def requests_frame(engine, recorder, trace: pd.DataFrame) -> pd.DataFrame:
    """Every trace request, enqueued or not, with its latencies (metrics.latencies)."""
    n = len(trace)
    finished = "handed_off" if engine.config.scheduler.engine_type == "prompt" else "finished"
    times = recorder.requests()  # scheduler order: request i is the i-th one added
    added = len(times["enqueue_s"])
    rows = []  # status, output_tokens, dp_rank, preemptions, recomputed, prefix hits, reason
    for i in range(n):
        if i >= added:
            rows.append(("unfinished", 0, -1, 0, 0, 0, "never enqueued"))
            continue
        s = engine.scheduler.seq(i)
        state = {"finished": finished, "rejected": "rejected"}.get(s.status, "unfinished")
        rows.append((state, s.output_len, s.dp_rank, s.num_preemptions, s.recomputed_tokens,
                     s.prefix_hit_tokens, s.reason))
    status, output_tokens, rank, preempt, recomputed, hits, reason = \
        zip(*rows) if rows else [()] * 7

    def per_request(name):  # NaN past the last request added
        return np.concatenate((times[name], np.full(n - added, np.nan)))

    requests = pd.DataFrame(dict(
        request_id=np.arange(n), arrival_s=trace["arrival_s"].to_numpy(np.float64),
        enqueue_s=per_request("enqueue_s"), first_scheduled_s=per_request("first_scheduled_s"),
        first_token_s=per_request("first_token_s"), last_token_s=per_request("last_token_s"),
        prompt_len=trace["prompt_len"].to_numpy(np.int64),
        max_new_tokens=trace["max_new_tokens"].to_numpy(np.int64),
        output_tokens=np.asarray(output_tokens, dtype=np.int64),
        dp_rank=np.asarray(rank, np.int32),
        preemptions=np.asarray(preempt, np.int32), recomputed_tokens=np.asarray(recomputed),
        prefix_hit_tokens=np.asarray(hits), status=list(status), reason=list(reason)))
    return metrics.latencies(requests)


def warmup_requests(recorder, n: int, warmup_steps: int) -> np.ndarray:
    """A warm-up request is one first scheduled in a warm-up step."""
    step = recorder.requests()["first_scheduled_step"]
    warm = np.zeros(n, dtype=bool)
    warm[:len(step)] = (step >= 0) & (step < warmup_steps)
    return warm


def engine_summary(steps: pd.DataFrame, peak_tflops) -> pd.DataFrame:
    """Scheduler-call and step percentiles, achieved TFLOP/s and MFU over measured steps;
    `steps` needs the recorder's SUMMARY_STEP_COLUMNS."""
    measured = steps[~steps["warmup"]]
    per_step = measured.groupby("step").agg(
        sched_call_ns=("sched_call_ns", "first"), sched_cpp_ns=("sched_cpp_ns", "first"),
        step_ns=("step_ns", "first"), forward_ns=("forward_ns", "first"),
        model_flops=("model_flops", "sum"))
    rows = []
    for col, metric in (("sched_call_ns", "sched_call"), ("sched_cpp_ns", "sched_cpp"),
                        ("step_ns", "step"), ("forward_ns", "forward")):
        for stat, value in metrics.describe(per_step[col].to_numpy() / 1e3).items():
            rows.append((metric, stat, value, "us"))
    forward_s = per_step["forward_ns"].sum() / 1e9
    dp = max(1, steps["dp_rank"].max() + 1) if len(steps) else 1
    tflops = per_step["model_flops"].sum() / forward_s / dp / 1e12 if forward_s > 0 else np.nan
    rows.append(("achieved", "tflops_per_device", tflops, "TFLOP/s"))
    if peak_tflops:
        rows.append(("mfu", "model", tflops / peak_tflops, "fraction"))
    return pd.DataFrame(rows, columns=metrics.SUMMARY_COLUMNS)


def write_manifest(manifest: dict, run_dir: Path) -> None:
    tmp = run_dir / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    os.replace(tmp, run_dir / "manifest.json")
