"""A point's answer: the columns of its row that its run (or capacity search) fills, as
the task writes them to the marker and the sweep's table holds them."""

from __future__ import annotations

from typing import Dict

# The answer's columns of a point's row (docs/sweeps.md, "The table"): summary values of
# the point's run, by name (harness/schema/summary.py).
SUMMARY_VALUES = {
    "output_tokens_per_s": "throughput.output_tokens",
    "attainment": "goodput.attainment",
    "goodput": "goodput.requests",
    "ttft_p50_s": "ttft.p50",
    "ttft_p99_s": "ttft.p99",
    "tpot_p50_s": "tpot.p50",
    "tpot_p99_s": "tpot.p99",
}
ANSWER = ("run_dir", "outcome", "rate", "concurrency", "output_tokens_per_device",
          "tokens_per_s_per_user", *SUMMARY_VALUES, "power_w", "power_source", "busy")


def empty_answer() -> Dict:
    return dict.fromkeys(ANSWER, None)
