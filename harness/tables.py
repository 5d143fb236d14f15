"""The result tables of one run (docs/metrics.md defines every column), written atomically.

steps: one row per (step, DP rank); batches: one row per (step, sequence); requests: one
row per trace request; summary: long form (metric, stat, value, unit); manifest.json.
Each file is written to a temporary name and renamed into place, so a reader never sees a
half-written table; the manifest says `complete: false` until the run ended cleanly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict

import numpy as np
import pandas as pd

from engine.plan import KIND_NAMES

from . import metrics


def steps_frame(recorder, labels: Dict[str, object]) -> pd.DataFrame:
    df = pd.DataFrame(recorder.steps.view())
    df.insert(2, "phase", np.where(df.pop("prompt_phase"), "prompt", "decode"))
    return df.assign(**labels)


def batches_frame(recorder, labels: Dict[str, object]) -> pd.DataFrame:
    df = pd.DataFrame(recorder.batches())
    df["kind"] = np.asarray(KIND_NAMES)[df["kind"].to_numpy(np.int64)]
    return df.assign(**labels)


def requests_frame(engine, recorder, trace: pd.DataFrame, steps: pd.DataFrame,
                   batches: pd.DataFrame):
    """(requests, token_times, token_offsets): every trace request, enqueued or not."""
    n = len(trace)
    finished = "handed_off" if engine.config.scheduler.engine_type == "prompt" else "finished"
    rows = []  # status, output_len, dp_rank, preemptions, recomputed, prefix hits, reason
    for i in range(n):
        if i not in recorder.enqueued:
            rows.append(("unfinished", 0, -1, 0, 0, 0, "never enqueued"))
            continue
        s = engine.scheduler.seq(i)
        state = {"finished": finished, "rejected": "rejected"}.get(s.status, "unfinished")
        rows.append((state, s.output_len, s.dp_rank, s.num_preemptions, s.recomputed_tokens,
                     s.prefix_hit_tokens, s.reason))
    status, output_len, rank, preempt, recomputed, hits, reason = zip(*rows) if rows else [()] * 7
    enqueue_s = np.array([recorder.enqueued.get(i, np.nan) for i in range(n)], dtype=np.float64)
    start_of = steps.groupby("step")["t_start_s"].min()
    first_sched = (batches.assign(t=batches["step"].map(start_of)).groupby("seq_id")["t"].min()
                   .reindex(range(n)).to_numpy())
    times, offsets = _token_csr(recorder, np.asarray(output_len, dtype=np.int64), enqueue_s)
    requests = pd.DataFrame(dict(
        request_id=np.arange(n), arrival_s=trace["arrival_s"].to_numpy(np.float64),
        enqueue_s=enqueue_s, first_scheduled_s=first_sched,
        prompt_len=trace["prompt_len"].to_numpy(np.int64),
        max_new_tokens=trace["output_len"].to_numpy(np.int64),
        output_len=np.asarray(output_len, dtype=np.int64), dp_rank=np.asarray(rank, np.int32),
        preemptions=np.asarray(preempt, np.int32), recomputed_tokens=np.asarray(recomputed),
        prefix_hit_tokens=np.asarray(hits), status=list(status), reason=list(reason)))
    return metrics.per_request(requests, times, offsets), times, offsets


def _token_csr(recorder, output_len: np.ndarray, enqueue_s: np.ndarray):
    """Exactly output_len token times per request: work discarded past the last token is
    dropped; a token that arrived with the request (completion engine) is stamped at its
    enqueue time."""
    ids, times = recorder.token_times()
    n = len(output_len)
    lo, hi = np.searchsorted(ids, np.arange(n)), np.searchsorted(ids, np.arange(n), "right")
    parts = []
    for i in range(n):
        got = times[lo[i]:min(hi[i], lo[i] + output_len[i])]
        missing = output_len[i] - len(got)
        parts.append(np.concatenate((np.full(missing, enqueue_s[i]), got)) if missing else got)
    offsets = np.concatenate(([0], np.cumsum(output_len))).astype(np.int64)
    return (np.concatenate(parts) if parts else np.zeros(0)), offsets


def engine_summary(steps: pd.DataFrame, peak_tflops) -> pd.DataFrame:
    """Scheduler-call and step percentiles, achieved TFLOP/s and MFU over measured steps."""
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


def write_table(df: pd.DataFrame, run_dir: Path, name: str, fmt: str) -> Path:
    path = run_dir / f"{name}.{fmt}"
    tmp = run_dir / f".{name}.{fmt}.tmp"
    if fmt == "parquet":
        df.to_parquet(tmp, index=False)
    else:
        df.to_csv(tmp, index=False)
    os.replace(tmp, path)
    return path


def write_manifest(manifest: dict, run_dir: Path) -> None:
    tmp = run_dir / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    os.replace(tmp, run_dir / "manifest.json")
