"""The engine summary: scheduler-call, step and forward percentiles, achieved TFLOP/s and
MFU, the prefix cache's hit rate and evictions, a modeled deployment's step parts over the
measured steps. It is fed the steps table a chunk at a time, as the recorder writes it, or
whole (`engine_summary`); docs/metrics.md defines each row ("Engine", "Prefix cache",
"Modeled step parts")."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np
import pandas as pd

from . import metrics

# per-step timings: the same on every rank's row of a step
TIMINGS = (("sched_call_ns", "sched_call"), ("sched_cpp_ns", "sched_cpp"),
           ("step_ns", "step"), ("forward_ns", "forward"))
# a modeled deployment's parts of a step (docs/modeling.md): per rank, summarised per step
# as the slowest rank's
PARTS = (("attention_s", "attention"), ("dense_s", "dense"), ("experts_s", "experts"),
         ("dispatch_s", "dispatch"), ("combine_s", "combine"), ("allreduce_s", "allreduce"))


def engine_summary(steps: pd.DataFrame, peak_tflops: Optional[float]) -> pd.DataFrame:
    """The summary rows of a whole steps table."""
    summary = StepSummary()
    summary.add(steps)
    return summary.rows(peak_tflops)


class StepSummary:
    """Keeps one value per measured step of each timing (exact percentiles need them: 32
    bytes a step), the model FLOPs summed over ranks, the number of steps, and the
    measured steps' first start and last end."""

    def __init__(self) -> None:
        self.steps = 0  # every step recorded, warm-up included
        self._timings: Dict[str, List[np.ndarray]] = {column: [] for column, _ in TIMINGS}
        self._parts: Dict[str, List[np.ndarray]] = {column: [] for column, _ in PARTS}
        # per measured step, the slowest rank's rank_s and the ranks' mean
        self._rank_s: Dict[str, List[np.ndarray]] = {"slowest": [], "mean": []}
        self._extrapolated = 0  # measured steps with a part looked up outside its table
        self._model_flops = 0.0
        self._prefill_tokens = 0
        # counts; NaN for a steps table from before prefix caching
        self._hit_tokens: float = 0
        self._evicted: float = 0
        self._ranks = 1
        self._measured = 0
        self._start, self._end = np.inf, -np.inf

    def add(self, steps: Mapping[str, np.ndarray]) -> None:
        """Columns of whole steps (a DataFrame or a mapping of arrays) in step order, the
        rows of one step adjacent, one per DP rank with a row (docs/tables.md, "steps"):
        step, dp_rank, warmup, the TIMINGS, model_flops, t_start_s, t_end_s,
        prefill_tokens_q (or, in a table from before it, phase and tokens_q),
        prefix_hit_tokens, kv_blocks_evicted and, where present, the PARTS and the rank
        aggregates (a table from before them has every rank's row)."""
        step = np.asarray(steps["step"])
        if not len(step):
            return
        starts = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
        self.steps += len(starts)
        ranks = np.diff(np.r_[starts, len(step)])
        if "idle_ranks" in steps:
            ranks = ranks + np.asarray(steps["idle_ranks"])[starts]
        self._ranks = max(self._ranks, int(ranks.max()))
        measured = ~np.asarray(steps["warmup"], bool)
        if not measured.any():
            return
        step = step[measured]
        first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
        self._measured += len(first)
        for column, _ in TIMINGS:
            self._timings[column].append(np.asarray(steps[column])[measured][first])
        for column, _ in PARTS:
            if column in steps:
                values = np.asarray(steps[column], dtype=np.float64)[measured]
                self._parts[column].append(np.maximum.reduceat(values, first))
        if "extrapolated" in steps:
            bits = np.asarray(steps["extrapolated"])[measured]
            self._extrapolated += int(np.count_nonzero(np.bitwise_or.reduceat(bits, first)))
        if self._ranks > 1:
            self._add_rank_s(steps, measured, first)
        self._model_flops += float(np.asarray(steps["model_flops"])[measured].sum())
        if "prefill_tokens_q" in steps:  # a mixed round's decode rows are no prefill
            self._prefill_tokens += int(np.asarray(steps["prefill_tokens_q"])[measured].sum())
        else:  # a steps table from before mixed batches: a prompt round's tokens
            phase = np.asarray(steps["phase"])
            prompt = measured & (phase == (1 if phase.dtype.kind in "iu" else "prompt"))
            self._prefill_tokens += int(np.asarray(steps["tokens_q"])[prompt].sum())
        if "prefix_hit_tokens" not in steps:  # a steps table from before prefix caching
            self._hit_tokens = self._evicted = np.nan
            return
        self._hit_tokens += int(np.asarray(steps["prefix_hit_tokens"])[measured].sum())
        self._evicted += int(np.asarray(steps["kv_blocks_evicted"])[measured].sum())
        self._start = min(self._start, float(np.asarray(steps["t_start_s"])[measured].min()))
        self._end = max(self._end, float(np.asarray(steps["t_end_s"])[measured].max()))

    def _add_rank_s(self, steps: Mapping[str, np.ndarray], measured: np.ndarray,
                    first: np.ndarray) -> None:
        """Each measured step's slowest and mean rank time: its aggregates, or in a table
        from before them (every rank's row) its rows'."""
        if "mean_rank_s" in steps:
            for name in self._rank_s:
                self._rank_s[name].append(
                    np.asarray(steps[f"{name}_rank_s"], dtype=np.float64)[measured][first])
        elif "rank_s" in steps:
            rank_s = np.asarray(steps["rank_s"], dtype=np.float64)[measured]
            ranks = np.diff(np.r_[first, len(rank_s)])
            self._rank_s["slowest"].append(np.maximum.reduceat(rank_s, first))
            self._rank_s["mean"].append(np.add.reduceat(rank_s, first) / ranks)

    @property
    def nbytes(self) -> int:
        """The per-step values kept so far, in bytes."""
        return sum(a.nbytes for kept in (self._timings, self._parts, self._rank_s)
                   for arrays in kept.values() for a in arrays)

    def window(self) -> Optional[Tuple[float, float]]:
        """The measured steps' span on the run's clock; None if no step was measured."""
        return (self._start, self._end) if self._start <= self._end else None

    def rows(self, peak_tflops: Optional[float], chips_per_rank: int = 1) -> pd.DataFrame:
        """`chips_per_rank`: the devices each DP rank's batch runs on (a deployment's
        attention TP group with its share of the experts)."""
        rows = []
        for column, metric in TIMINGS:
            timings = self._timings[column]
            per_step = np.concatenate(timings) if timings else np.zeros(0)
            rows += _distribution(metric, per_step / 1e3)
        forward_s = sum(part.sum() for part in self._timings["forward_ns"]) / 1e9
        chips = self._ranks * chips_per_rank
        tflops = self._model_flops / forward_s / chips / 1e12 if forward_s > 0 \
            else np.nan
        span = self._end - self._start
        if any(chunk.any() for chunks in self._parts.values() for chunk in chunks):
            for column, metric in PARTS:  # a modeled deployment's: not all zero
                chunks = self._parts[column]  # one column's values at a time
                rows += _distribution(metric, np.concatenate(chunks) * 1e6 if chunks
                                      else np.zeros(0))
            rows.append(("extrapolated", "steps", self._extrapolated, "steps"))
        rows += self._imbalance()
        rows.append(("step_rate", "per_s", self._measured / span if span > 0 else np.nan, "1/s"))
        rows.append(("achieved", "tflops_per_device", tflops, "TFLOP/s"))
        if peak_tflops:
            rows.append(("mfu", "model", tflops / peak_tflops, "fraction"))
        filled = self._hit_tokens + self._prefill_tokens
        rows += [("prefix_cache", "hit_rate", self._hit_tokens / filled if filled else np.nan,
                  "fraction"),
                 ("prefix_cache", "hit_tokens", self._hit_tokens, "tokens"),
                 ("prefix_cache", "evicted_blocks", self._evicted, "blocks")]
        return pd.DataFrame(rows, columns=metrics.SUMMARY_COLUMNS)

    def _imbalance(self) -> list:
        """docs/metrics.md, "DP imbalance": over the measured steps whose ranks have a
        modeled time; none on one DP rank or where no step has one."""
        slowest, mean = (np.concatenate(v) if v else np.zeros(0)
                         for v in self._rank_s.values())
        timed = slowest > 0
        if self._ranks < 2 or not timed.any():
            return []
        ratio = slowest[timed] / mean[timed]
        described = metrics.describe(ratio)
        return [("dp_imbalance", stat, described[stat], "ratio")
                for stat in ("mean", "p50", "p99", "max")] + \
            [("dp_imbalance", "lost_share", 1 - mean.sum() / slowest.sum(), "fraction")]


def _distribution(metric: str, us: np.ndarray) -> list:
    """A distribution's summary rows in microseconds, its count in samples."""
    return [(metric, stat, value, "samples" if stat == "count" else "us")
            for stat, value in metrics.describe(us).items()]
