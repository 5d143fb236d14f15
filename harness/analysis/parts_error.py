"""Step parts, modeled vs measured: how far a device model's time for each part of a step
is from the time a torch device measured for it, in runs of one workload
(docs/comparing.md, "Step parts, modeled vs measured"; the error: docs/metrics.md, "Step
part error").

The two runs did not run the same steps (a batch depends on timing), so each run's step
rows are grouped by the rank's batch: its phase and its scheduled tokens in power-of-two
buckets. Where a group holds steps of both runs, the medians are compared.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from ..record.run import Run
from . import interval

PARTS = ("attention", "dense", "experts", "dispatch", "combine", "forward")
PHASES = ("prefill", "mixed", "decode")  # a rank's batch: every token a prompt's, some, none
TORCH_DEVICES = frozenset({"auto", "cpu", "cuda", "npu"})
# What differs between a measured run and a modeled run of one workload: the device, and
# the keys whose defaults the device decides (docs/workloads.md: a modeled device runs on
# the virtual clock, its frontend inline, its replay in the C++ loop).
DEVICE_KEYS = frozenset({"device", "clock", "frontend.mode", "replay_loop"})
ROWS = ["warmup", "empty", "dp_rank", "tokens_q", "prefill_tokens_q"]
MIN_STEPS = interval.MIN_RUNS  # fewer measured steps in a bucket: no interval
RESAMPLED_VALUES = 2_000_000   # values a bootstrap batch holds at once (16 MB of doubles)


@dataclass(frozen=True)
class Bucket:
    """One group of like steps: a phase and tokens_q in `tokens_from` .. `tokens_to`."""

    phase: str
    tokens_from: int
    tokens_to: int
    steps_measured: int
    steps_modeled: int
    measured_s: float  # the measured steps' median
    modeled_s: float   # the modeled steps' median
    error: float     # modeled / measured - 1; NaN where the measured median is 0
    low: float       # the error's 95 % interval, the measured steps resampled; NaN without
    high: float


@dataclass(frozen=True)
class PartError:
    """One part's buckets (those both runs have steps in) and their errors weighted by
    their measured steps; `steps_compared` of the measured arm's `steps_measured` steps lie
    in those buckets."""

    part: str
    buckets: Tuple[Bucket, ...]
    error: float
    steps_compared: int
    steps_measured: int


@dataclass
class PartsComparison:
    """The step parts of a measured arm against a modeled arm's: which arm is which, the
    devices, each part's error, and the parts left out and why. `not_compared` says why no
    part was compared (the arms differ in more than the device), empty otherwise."""

    measured_arm: str  # "A" or "B"
    modeled_arm: str
    measured_device: str  # the device the measured runs ran on ("x86_64 (cpu)")
    profile: str          # the modeled runs' device profile ("H100")
    parts: List[PartError] = field(default_factory=list)
    left_out: Dict[str, str] = field(default_factory=dict)  # part -> why
    not_compared: str = ""

    def to_dict(self) -> dict:
        out = asdict(self)
        out["note"] = f"modeled: arm {self.modeled_arm}'s figures are the {self.profile} " \
            f"profile's device model, not a measurement"
        return out


def compare_parts(runs_a: Sequence[Run], runs_b: Sequence[Run],
                  differing: Dict[str, Tuple[list, list]]) -> Optional[PartsComparison]:
    """The step parts compared where one arm's runs are all measured on a torch device and
    the other's all modeled, on one profile; None for any other pair of arms."""
    measured_first = _measured(runs_a) and _modeled(runs_b)
    if not (measured_first or (_modeled(runs_a) and _measured(runs_b))):
        return None
    measured, modeled = (runs_a, runs_b) if measured_first else (runs_b, runs_a)
    profiles = sorted({r.pool_device() for r in modeled})
    out = PartsComparison("A" if measured_first else "B", "B" if measured_first else "A",
                          ", ".join(sorted({_device(r) for r in measured})), ", ".join(profiles))
    others = [k for k in differing if k not in DEVICE_KEYS]
    if others or len(profiles) > 1:
        out.not_compared = f"the arms differ in more than the device: {', '.join(others)}" \
            if others else f"the modeled runs are of {len(profiles)} profiles"
        return out
    rows_measured, rows_modeled = _rows(measured), _rows(modeled)
    for part in PARTS:
        why = _missing(part, rows_measured, rows_modeled)
        result = None if why else part_error(part, rows_measured, rows_modeled)
        if result is None:
            out.left_out[part] = why or "no phase and token bucket holds steps of both arms"
        else:
            out.parts.append(result)
    return out


def _measured(runs: Sequence[Run]) -> bool:
    return bool(runs) and all(not r.modeled and str(r.keys.get("device", "")).partition(":")[0]
                              in TORCH_DEVICES for r in runs)


def _modeled(runs: Sequence[Run]) -> bool:
    return bool(runs) and all(r.modeled for r in runs)


def _device(run: Run) -> str:
    return f"{run.device} ({run.keys.get('device')})"


def _ranks(run: Run, frame: pd.DataFrame, present: set) -> int:
    """The run's DP ranks: a step's rows and the idle ranks it left out (docs/tables.md)."""
    if "idle_ranks" not in present:
        return int(frame["dp_rank"].nunique())
    steps = run.table("steps", ["step", "idle_ranks"]).groupby("step")
    return int((steps.size() + steps["idle_ranks"].first()).max())


def _rows(runs: Sequence[Run]) -> pd.DataFrame:
    """The arm's step rows that ran a batch past warm-up, every run's: a rank of a step
    each, with its `phase`, its bucket's `low` end and the parts' times in s (NaN where a
    run has no such column)."""
    frames = []
    for run in runs:
        present = set(run.columns("steps"))
        times = [c for c in (*(f"{p}_s" for p in PARTS[:-1]), "forward_ns") if c in present]
        frame = run.table("steps", ROWS + times)
        frames.append(frame.assign(ranks=_ranks(run, frame, present)))
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[~rows["warmup"].astype(bool) & ~rows["empty"].astype(bool)
                & (rows["tokens_q"] > 0)]
    tokens = rows["tokens_q"].to_numpy(np.int64)
    prefill = rows["prefill_tokens_q"].to_numpy(np.int64)
    phase = np.select([prefill == tokens, prefill == 0], ["prefill", "decode"], "mixed")
    low = np.left_shift(1, np.floor(np.log2(tokens)).astype(np.int64))  # exact at 2^k
    values = {p: rows.get(f"{p}_s", pd.Series(math.nan, rows.index)) for p in PARTS[:-1]}
    values["forward"] = rows.get("forward_ns", pd.Series(math.nan, rows.index)) * 1e-9
    return pd.DataFrame(dict(phase=phase, low=low, ranks=rows["ranks"].to_numpy(),
                             **{p: v.to_numpy(np.float64) for p, v in values.items()}))


def _missing(part: str, measured: pd.DataFrame, modeled: pd.DataFrame) -> str:
    """Why a part cannot be compared, or ""."""
    if part == "forward" and max(measured["ranks"].max(), modeled["ranks"].max()) > 1:
        return "forward_ns is the whole step's, every DP rank's, not one rank's batch: " \
            "compared on one-rank runs only"
    for arm, rows in (("measured", measured), ("modeled", modeled)):
        if not np.isfinite(rows[part].to_numpy()).any():
            return f"the {arm} runs hold no value of it past warm-up (no {_column(part)} " \
                f"column, NaN, or no step)"
    if not measured[part].to_numpy().any():
        return f"0 in every measured step: the measured runs had none (dispatch and " \
            f"combine need EP) or did not time it ({_column(part)})"
    return ""


def _column(part: str) -> str:
    return "forward_ns" if part == "forward" else f"{part}_s"


def part_error(part: str, measured: pd.DataFrame, modeled: pd.DataFrame) -> Optional[PartError]:
    """One part's buckets that both arms' rows (`_rows`) have steps in, in PHASES' order and
    then by tokens, and their errors weighted by measured steps; None where there is none."""
    measured = measured[np.isfinite(measured[part])]
    modeled = modeled[np.isfinite(modeled[part])]
    theirs = {key: rows[part].to_numpy() for key, rows in modeled.groupby(["phase", "low"])}
    buckets = []
    for (phase, low), rows in measured.groupby(["phase", "low"]):
        if (phase, low) in theirs:
            buckets.append(bucket(str(phase), int(low), rows[part].to_numpy(),
                                  theirs[(phase, low)]))
    if not buckets:
        return None
    buckets.sort(key=lambda b: (PHASES.index(b.phase), b.tokens_from))
    judged = [b for b in buckets if math.isfinite(b.error)]
    weights = np.array([b.steps_measured for b in judged], dtype=np.float64)
    error = float(np.average([b.error for b in judged], weights=weights)) if judged \
        else math.nan
    return PartError(part, tuple(buckets), error, sum(b.steps_measured for b in buckets),
                     len(measured))


def bucket(phase: str, low: int, measured: np.ndarray, modeled: np.ndarray) -> Bucket:
    """One bucket's medians and error. The interval resamples the measured steps against
    the modeled median as it is (two copies: a sample needs two values to resample)."""
    median = float(np.median(modeled))
    fixed = np.full(2, median)
    if len(measured) >= MIN_STEPS:
        r = interval.ratio(measured, fixed, min_runs=2,
                           batch=max(1, RESAMPLED_VALUES // len(measured)))
    else:
        r = interval.ratio(measured, fixed[:1])  # the point alone
    return Bucket(phase, low, 2 * low - 1, len(measured), len(modeled),
                  float(np.median(measured)), median, r.ratio - 1, r.low - 1, r.high - 1)
