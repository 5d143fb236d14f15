"""The summary rows of a P/D deployment beside the latency rows (docs/metrics.md,
"Disaggregation"): each pool's engine rows under its name (`prefill_step`,
`decode_forward`, ...), each prefill instance's prefix-cache hit rate (`prefill0_...`),
tokens per second per device of each pool and of the whole deployment, and what the KV
transfers add: the wait for decode room, and the time from the hand-off to the KV's
arrival."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from . import metrics


def pd_rows(recorder, service, engines: Mapping[str, Any], latency: pd.DataFrame) \
        -> pd.DataFrame:
    """`engines`: one engine of each pool (its peak and layout); `latency`: the run's
    latency rows (the tokens and the window the rates divide)."""
    parts = []
    for pool in service.pools:
        engine = engines[pool.role]
        d = pool.deployment
        rows = recorder.step_summaries[pool.role].rows(engine.peak_tflops,
                                                       d.devices // d.attention_dp)
        parts.append(rows.assign(metric=pool.role + "_" + rows["metric"]))
    value = {(m, s): v for m, s, v in zip(latency["metric"], latency["stat"], latency["value"])}
    window = value[("window", "duration")]

    def rate(tokens: float, devices: int) -> float:
        return tokens / window / devices if window > 0 else np.nan

    tokens_in, tokens_out = value[("tokens", "input")], value[("tokens", "output")]
    rows = [("per_device", "input_tokens_per_prefill_device",
             rate(tokens_in, service.prefill.devices), "tok/s"),
            ("per_device", "output_tokens_per_decode_device",
             rate(tokens_out, service.decode.devices), "tok/s"),
            ("per_device", "total_tokens", rate(tokens_in + tokens_out, service.devices),
             "tok/s")]
    for index, (hits, prefilled) in recorder.prefix_hits.items():
        filled = hits + prefilled
        rows.append((f"prefill{index}_prefix_cache", "hit_rate",
                     hits / filled if filled else np.nan, "fraction"))
    t = recorder.pd_times
    measured = ~recorder.warm
    moved = measured & np.isfinite(t["transfer_end_s"])
    waited = measured & np.isfinite(t["transfer_start_s"])
    for metric, values in (("kv_transfer", (t["transfer_end_s"] - t["handoff_s"])[moved]),
                           ("decode_wait", t["decode_wait_s"][waited])):
        rows += [(metric, stat, float(x), "samples" if stat == "count" else "s")
                 for stat, x in metrics.describe(values).items()]
    parts.append(pd.DataFrame(rows, columns=list(metrics.SUMMARY_COLUMNS)))
    return pd.concat(parts, ignore_index=True)
