"""The device table summarised over the measured window, as summary rows.

Rows look like the rest of the summary (harness.record.metrics.SUMMARY_COLUMNS: metric, stat,
value, unit). Device metrics are named after the device ("gpu0_util", "npu1_mem_used"),
host metrics after what they measure ("process_cpu", "host_mem_used"). A metric appears
when its source reported it at least once in the run; its value is NaN where the window
holds nothing to summarise. Utilisations are reported over samples, never per step.
"""

import math

import numpy as np
import pandas as pd

from harness.record.metrics import SUMMARY_COLUMNS, describe

DEVICE_PREFIX = {"nvml": "gpu", "npu-smi": "npu"}
SPREAD = {"util_pct": "util", "sm_activity_pct": "sm_activity",
          "tensor_activity_pct": "tensor_activity", "aicore_pct": "aicore",
          "mem_busy_pct": "mem_busy", "mem_bw_util_pct": "mem_bw_util",
          "process_cpu_pct": "process_cpu", "host_cpu_pct": "host_cpu"}  # all in %
PEAK = {"mem_used_bytes": "mem_used", "process_rss_bytes": "process_rss",
        "host_mem_used_bytes": "host_mem_used"}


def device_summary(frame: pd.DataFrame, window_start_s: float, window_end_s: float,
                   output_tokens: int) -> pd.DataFrame:
    """Utilisation stats (describe()), memory peaks, mean power and energy over
    [window_start_s, window_end_s] on the run's clock; energy per output token where
    every accelerator's energy over the window is known."""
    rows, energies = [], []
    frame = frame.sort_values("t_s", kind="stable")
    for (source, device), samples in frame.groupby(["source", "device"], sort=True):
        prefix = f"{DEVICE_PREFIX[source]}{device}_" if source in DEVICE_PREFIX else ""
        inside = samples[(samples["t_s"] >= window_start_s) & (samples["t_s"] <= window_end_s)]
        reported = samples.notna().any()
        for column, name in SPREAD.items():
            if reported[column]:
                rows += [(prefix + name, stat, float(x), "samples" if stat == "count" else "%")
                         for stat, x in describe(inside[column]).items()]
        for column, name in PEAK.items():
            if reported[column]:
                rows.append((prefix + name, "peak", _max(inside[column]), "bytes"))
        if reported["mem_total_bytes"]:
            rows.append((prefix + "mem_total", "value", _max(inside["mem_total_bytes"]), "bytes"))
        if reported["power_w"]:
            rows.append((prefix + "power", "mean", float(inside["power_w"].mean()), "W"))
        if source in DEVICE_PREFIX:
            energies.append(_energy(samples, window_start_s, window_end_s))
            if reported["energy_j"]:
                rows.append((prefix + "energy", "total", energies[-1], "J"))
    if any(not math.isnan(e) for e in energies):
        total = float(np.sum(energies))  # NaN when any accelerator's energy is unknown
        per_token = total / output_tokens if output_tokens > 0 else math.nan
        rows += [("energy", "total", total, "J"),
                 ("energy_per_output_token", "value", per_token, "J/token")]
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def _max(values) -> float:
    return float(values.max()) if values.notna().any() else math.nan


def _energy(samples, start, end) -> float:
    """Joules over the window from the cumulative counter: the last reading at or before
    `end` minus the last one at or before `start` (else the window's first); NaN when a
    reading in between is missing (power unsupported, device lost)."""
    t, energy = samples["t_s"].to_numpy(), samples["energy_j"].to_numpy(np.float64)
    inside = (t >= start) & (t <= end)
    if not inside.any():
        return math.nan
    before = np.flatnonzero(t <= start)
    first = before[-1] if len(before) else np.flatnonzero(inside)[0]
    last = np.flatnonzero(t <= end)[-1]
    span = energy[first:last + 1]
    return math.nan if np.isnan(span).any() else float(span[-1] - span[0])
