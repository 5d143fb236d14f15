"""/metrics in Prometheus' text format (version 0.0.4): the engine's figures under vLLM's
names where vLLM has one (docs/serving.md, "Metrics"), steptrace's own under `steptrace:`.
Updated on the server's event loop only, each step's figures at once: a scrape sees whole
steps."""

from __future__ import annotations

import bisect
from typing import Dict, List, Sequence, Tuple

# vLLM's buckets for tokens per engine step
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # the last: above every bucket
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> List[str]:
        out, total = [], 0
        for le, n in zip((*map(_number, self.buckets), "+Inf"), self.counts):
            total += n
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {total}')
        return out + [f"{name}_sum{{{labels}}} {_number(self.sum)}",
                      f"{name}_count{{{labels}}} {self.count}"]


class Metrics:
    """The served engine's figures."""

    def __init__(self, model: str) -> None:
        self.labels = f'model_name="{_escape(model)}"'
        self.running = self.waiting = 0
        self.kv_usage = 0.0
        self.counters: Dict[str, float] = dict.fromkeys(
            ("prompt_tokens", "generation_tokens", "request_success", "request_rejected",
             "prefix_cache_queries", "prefix_cache_hits"), 0)
        self.iteration_tokens = Histogram(ITERATION_TOKENS_BUCKETS)
        self.step_seconds = Histogram(SECONDS_BUCKETS)
        self.delivery_seconds = Histogram(SECONDS_BUCKETS)

    def step(self, tokens: int, seconds: float, running: int, waiting: int,
             kv_usage: float, queried: int, hit: int) -> None:
        """One step's figures; `queried` and `hit`: the prompt tokens its admissions looked
        up in the prefix cache, and found there."""
        self.counters["prefix_cache_queries"] += queried
        self.counters["prefix_cache_hits"] += hit
        self.iteration_tokens.observe(tokens)
        self.step_seconds.observe(seconds)
        self.running, self.waiting, self.kv_usage = running, waiting, kv_usage

    def text(self) -> str:
        lines: List[str] = []
        gauges: Tuple[Tuple[str, str, float], ...] = (
            ("vllm:num_requests_running", "requests in the engine's running batch",
             self.running),
            ("vllm:num_requests_waiting", "requests waiting for the engine", self.waiting),
            ("vllm:kv_cache_usage_perc", "KV cache usage, 1 is full", self.kv_usage))
        for name, meaning, value in gauges:
            lines += [f"# HELP {name} {meaning}", f"# TYPE {name} gauge",
                      f"{name}{{{self.labels}}} {_number(value)}"]
        counters = (("vllm:prompt_tokens_total", "prompt tokens of the requests finished", "prompt_tokens"),
                    ("vllm:generation_tokens_total", "tokens generated",
                     "generation_tokens"),
                    ("vllm:request_success_total", "requests finished", "request_success"),
                    ("steptrace:request_rejected_total", "requests the scheduler rejected",
                     "request_rejected"),
                    ("vllm:prefix_cache_queries_total", "prompt tokens looked up in the "
                     "prefix cache", "prefix_cache_queries"),
                    ("vllm:prefix_cache_hits_total", "of them, found there", "prefix_cache_hits"))
        for name, meaning, key in counters:
            lines += [f"# HELP {name} {meaning}", f"# TYPE {name} counter",
                      f"{name}{{{self.labels}}} {_number(self.counters[key])}"]
        histograms = (
            ("vllm:iteration_tokens_total", "tokens per engine step", self.iteration_tokens),
            ("steptrace:step_duration_seconds", "an engine step, schedule to postprocess "
             "(a modeled device: its modeled time, paced)", self.step_seconds),
            ("steptrace:token_delivery_seconds", "a stream's tokens: from the step that "
             "committed them to their chunk written", self.delivery_seconds))
        for name, meaning, histogram in histograms:
            lines += [f"# HELP {name} {meaning}", f"# TYPE {name} histogram",
                      *histogram.lines(name, self.labels)]
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _escape(value: str) -> str:
    """A label's value as Prometheus' text format writes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
