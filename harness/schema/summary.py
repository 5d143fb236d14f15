"""Every summary row a run may write, declared once (docs/metrics.md defines each, in the
section named here), which clock times it (`host_timed`), and which rows each view shows:
`show` and a run's headline in a report print HEADLINE in this order (`headline`: the rows a
run has, a P/D run's POOL_HEADLINE per pool), `compare` and a report's comparison lead with
COMPARISON_HEADLINE for the runs' kind and show the TEXT_STATS of every other metric on
request, a capacity search's table holds CAPACITY_ROWS of each probe; `--json`, `--csv` and
the tables carry every row.
tests/test_summary_catalogue.py holds the runs' summaries, the views and docs/metrics.md's
summary table to this catalogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Collection, Dict, Iterable, List, Mapping, Optional, Tuple

# A distribution's statistics (harness/record/metrics.py `describe`): its count in samples.
DISTRIBUTION = ("count", "mean", "min", "p50", "p90", "p95", "p99", "max")
DEVICE = "{device}"  # a device's prefix in a telemetry metric's name: gpu0_, npu1_


# What times a metric (docs/metrics.md, "Host-timed figures"): the run's clock (the host's
# wall clock in a measured run, the virtual clock in a modeled one), always the host (the
# harness's own timings and CPU), or no clock of the host (counts, the device's readings).
RUN_CLOCK, HOST = "run clock", "host"


@dataclass(frozen=True)
class Metric:
    name: str  # DEVICE in it stands for a device's prefix
    units: Mapping[str, str]  # stat -> unit
    meaning: str
    section: str  # of docs/metrics.md
    clock: str = ""  # RUN_CLOCK, HOST or "" (not timed by the host)


def distribution(name: str, unit: str, meaning: str, section: str, clock: str = "") -> Metric:
    return Metric(name, {s: "samples" if s == "count" else unit for s in DISTRIBUTION},
                  meaning, section, clock)


def stats(unit: str, *names: str) -> Dict[str, str]:
    return dict.fromkeys(names, unit)


RUN, FRONTEND, ENGINE = "Run level", "Frontend", "Work per step"
DEVICES, PARTS = "Device utilisation", "Modeled step parts"
IMBALANCE, PD = "DP imbalance", "Disaggregation"
SESSIONS = "Sessions"
# A P/D deployment writes the rows of these sections once per pool, named
# `prefill_<metric>` / `decode_<metric>` (the prefix cache's hit rate also per instance,
# `prefill0_prefix_cache`).
POOLED = (ENGINE, "Rates", "Prefix cache", PARTS, IMBALANCE)
SUMMARY: Tuple[Metric, ...] = (
    Metric("requests", stats("requests", "finished", "handed_off", "rejected", "unfinished",
                             "warmup"),
           "requests measured, by how they ended; and those first scheduled in warm-up", RUN),
    Metric("tokens", stats("tokens", "input", "output"),
           "prompt and output tokens of the completed requests", RUN),
    Metric("window", stats("s", "duration"), "the measured requests' span", RUN, RUN_CLOCK),
    Metric("throughput", {"requests": "req/s", "output_tokens": "tok/s",
                          "total_tokens": "tok/s"}, "completed work over the window", RUN,
           RUN_CLOCK),
    Metric("goodput", {"requests": "req/s", "attainment": "fraction"},
           "requests within every SLO limit (only when SLOs are given)", RUN, RUN_CLOCK),
    Metric("slo", stats("s", "ttft", "tpot", "e2e"), "the SLO limits used", RUN),
    *(distribution(name, "s", meaning, RUN, RUN_CLOCK) for name, meaning in (
        ("ttft", "time to first token"), ("tpot", "time per output token"),
        ("itl", "inter-token latency"), ("e2e", "end-to-end latency"),
        ("queueing_delay", "first schedule - arrival"),
        ("schedule_fidelity", "enqueue - intended arrival"))),
    Metric("decode_stall", {**distribution("", "s", "", "").units, "share": "fraction"},
           "per request, the steps it sat out while decoding; their share of the requests' "
           "first-to-last-token time", "Decode stall", RUN_CLOCK),
    distribution("session_makespan", "s", "a session's root arrival to its last token",
                 SESSIONS, RUN_CLOCK),
    distribution("session_turns", "turns", "a session's turns, sub-agents' included", SESSIONS),
    Metric("session_time", stats("fraction", "engine_share", "gap_share"),
           "of the sessions' makespans, the time some turn of theirs was in the engine; the "
           "rest, waiting on their gaps", SESSIONS, RUN_CLOCK),
    Metric("session_prefix_hit", stats("fraction", "first_turns", "later_turns"),
           "prompt tokens the prefix cache served, of the sessions' first turns and of their "
           "later ones", SESSIONS),
    *(distribution(f"ttft_prefix_{name}", "s", f"time to first token of the turns {what}",
                   SESSIONS, RUN_CLOCK)
      for name, what in (("hit", "whose prompt hit the prefix cache"),
                         ("miss", "whose prompt found nothing in it"))),
    distribution("enqueue_drift", "s", "the frontend's enqueue - arrival", FRONTEND, HOST),
    distribution("delivery_delay", "s", "a token's delivery - its commit", FRONTEND, HOST),
    Metric("frontend", {"cpu_share": "% of one core", "undelivered": "tokens"},
           "the frontend thread's CPU over its wall time; tokens a stop abandoned", FRONTEND,
           HOST),
    *(distribution(name, "us", meaning, ENGINE, HOST) for name, meaning in (
        ("sched_call", "schedule() seen from Python"), ("sched_cpp", "schedule() inside C++"),
        ("step", "one engine step"))),
    distribution("forward", "us", "the forward (or its modeled time)", ENGINE, RUN_CLOCK),
    Metric("step_rate", stats("1/s", "per_s"), "measured steps per second", ENGINE, RUN_CLOCK),
    Metric("achieved", stats("TFLOP/s", "tflops_per_device"), "model FLOPs per device-second",
           "Rates", RUN_CLOCK),
    Metric("mfu", stats("fraction", "model"), "achieved over the device's peak", "Rates",
           RUN_CLOCK),
    Metric("prefix_cache", {"hit_rate": "fraction", "hit_tokens": "tokens",
                            "evicted_blocks": "blocks"}, "prompt tokens a prefix hit served",
           "Prefix cache"),
    *(distribution(name, "us", f"the modeled step's {name} part (a deployment's)", PARTS)
      for name in ("attention", "dense", "experts", "dispatch", "combine", "allreduce")),
    Metric("extrapolated", {"steps": "steps"}, "measured steps a part of which was looked up "
           "outside its kernel table's rows (a deployment timed from kernel tables)", PARTS),
    Metric("dp_imbalance", {**stats("ratio", "mean", "p50", "p99", "max"),
                            "lost_share": "fraction"},
           "the slowest DP rank's own step over the mean rank's, per modeled step; the "
           "rank-time spent waiting for the slowest", IMBALANCE),
    Metric("per_device", {"input_tokens_per_prefill_device": "tok/s",
                          "output_tokens_per_decode_device": "tok/s", "total_tokens": "tok/s"},
           "P/D: prompt tokens per prefill device, output tokens per decode device, all "
           "tokens per device of the deployment, over the window", PD, RUN_CLOCK),
    distribution("kv_transfer", "s", "P/D: a request's hand-off to its KV's arrival at the "
                 "decode instance: what the transfer adds to TTFT", PD, RUN_CLOCK),
    distribution("decode_wait", "s", "P/D: the prefill's request for decode room to the "
                 "transfer's start", PD, RUN_CLOCK),
    Metric("harness", stats("us", "per_step", "per_request"),
           "the null-engine calibration: the harness's own cost",
           "Harness overhead (null-engine calibration)", HOST),
    Metric("steps", stats("steps", "recorded"), "steps a run that did not finish recorded",
           RUN),
    *(distribution(f"{DEVICE}{name}", "%", f"the device's {what}, over its samples", DEVICES)
      for name, what in (("util", "utilisation"), ("sm_activity", "SM activity"),
                         ("tensor_activity", "tensor-core activity"),
                         ("aicore", "AI Core utilisation"), ("mem_busy", "memory busy time"),
                         ("mem_bw_util", "memory bandwidth utilisation"))),
    distribution("process_cpu", "%", "the harness's process tree's CPU, over its samples",
                 DEVICES, HOST),
    distribution("host_cpu", "%", "the host's CPU, over its samples", DEVICES),
    *(Metric(name, stats("bytes", "peak"), f"peak {what}", DEVICES) for name, what in (
        (f"{DEVICE}mem_used", "device memory used"), ("process_rss", "RSS of the process tree"),
        ("host_mem_used", "host memory used"))),
    Metric(f"{DEVICE}mem_total", stats("bytes", "value"), "device memory", DEVICES),
    Metric(f"{DEVICE}power", stats("W", "mean"), "the device's mean power", DEVICES),
    Metric(f"{DEVICE}energy", stats("J", "total"), "the device's energy over the window",
           DEVICES),
    Metric("energy", stats("J", "total"), "every accelerator's energy over the window",
           DEVICES),
    Metric("energy_per_output_token", stats("J/token", "value"),
           "accelerator energy over output tokens", DEVICES),
)
_DEVICE_PREFIX = r"(?:gpu|npu)\d+_"


_POOL_PREFIX = re.compile(r"(?:prefill|decode)\d*_")


_PATTERNS = tuple((re.compile(re.escape(m.name).replace(re.escape(DEVICE), _DEVICE_PREFIX)), m)
                  for m in SUMMARY)


@lru_cache(maxsize=4096)  # a run's reads ask for the same few hundred names; a table read
# back may name any, so the memo is bounded
def find(metric: str) -> Optional[Metric]:
    """The catalogue's entry for a summary row's metric (a device's by its pattern, a
    pool's by its name's prefix)."""
    for pattern, m in _PATTERNS:
        if pattern.fullmatch(metric):
            return m
    pool = _POOL_PREFIX.match(metric)
    if pool:
        pooled = find(metric[pool.end():])
        return pooled if pooled is not None and pooled.section in POOLED else None
    return None


def host_timed(metric: str, modeled: bool) -> bool:
    """Whether a host's clock (or its CPU) times the metric's figures: the HOST ones always,
    the RUN_CLOCK ones in a measured run (docs/metrics.md, "Host-timed figures")."""
    m = find(metric)
    return m is not None and (m.clock == HOST or (m.clock == RUN_CLOCK and not modeled))


def uncatalogued(rows: Iterable[Tuple[str, str, str]]) -> list:
    """The (metric, stat, unit) rows the catalogue does not declare, as declared."""
    out = []
    for metric, stat, unit in rows:
        m = find(metric)
        if m is None or m.units.get(stat) != unit:
            out.append((metric, stat, unit))
    return out


HEADLINE = [("steps", "recorded"), ("requests", "finished"), ("requests", "rejected"),
            ("throughput", "requests"), ("throughput", "output_tokens"), ("goodput", "requests"),
            ("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("itl", "p99"),
            ("e2e", "p50"), ("decode_stall", "share"),
            # a session trace's: how its sessions did
            ("session_makespan", "p50"), ("session_makespan", "p99"), ("session_turns", "mean"),
            ("session_time", "engine_share"), ("session_prefix_hit", "first_turns"),
            ("session_prefix_hit", "later_turns"), ("ttft_prefix_hit", "p50"),
            ("ttft_prefix_miss", "p50"),
            # a P/D run's: how the pools did
            ("per_device", "input_tokens_per_prefill_device"),
            ("per_device", "output_tokens_per_decode_device"), ("per_device", "total_tokens"),
            ("kv_transfer", "p50"), ("kv_transfer", "p99"), ("decode_wait", "p99"),
            ("sched_call", "p50"), ("sched_call", "p99"), ("sched_cpp", "p50"),
            ("step", "p50"), ("harness", "per_step"), ("achieved", "tflops_per_device"),
            ("mfu", "model"), ("dp_imbalance", "p50"), ("dp_imbalance", "lost_share")]
# HEADLINE's rows that a P/D run writes per pool instead (`prefill_mfu`, `decode_mfu`), shown
# in their place, each pool's: the pools' share of their peak and their DP ranks' tax.
POOL_HEADLINE = [("mfu", "model"), ("dp_imbalance", "lost_share")]


def headline(present: Collection[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The (metric, stat) rows of HEADLINE among `present` (a run's rows), in its order;
    where a P/D run has a row of POOL_HEADLINE per pool instead (`prefill_mfu`), each
    pool's."""
    out = []
    for metric, stat in HEADLINE:
        if (metric, stat) in present:
            out.append((metric, stat))
        elif (metric, stat) in POOL_HEADLINE:
            out += [(f"{pool}_{metric}", stat) for pool in ("prefill", "decode")
                    if (f"{pool}_{metric}", stat) in present]
    return out


# The capacity table's columns read from each probe's summary (harness/sweeps/capacity.py;
# output_tokens_per_device is the row over the deployment's devices).
CAPACITY_ROWS = {"attainment": ("goodput", "attainment"), "goodput": ("goodput", "requests"),
                 "output_tokens_per_device": ("throughput", "output_tokens"),
                 "ttft_p99_s": ("ttft", "p99"), "tpot_p50_s": ("tpot", "p50"),
                 "tpot_p99_s": ("tpot", "p99")}
# docs/gil.md's primary metrics, declared before measuring: the gil table's columns
GIL_PRIMARY = [("sched_call", "p50"), ("sched_call", "p99"), ("step_rate", "per_s"),
               ("enqueue_drift", "p99"), ("delivery_delay", "p99"), ("frontend", "cpu_share")]
# A session trace's runs' rows (a request trace's have none) a comparison leads with
SESSION_COMPARISON = [("session_makespan", "p50"), ("session_makespan", "p99"),
                      ("session_time", "engine_share"), ("session_prefix_hit", "later_turns"),
                      ("ttft_prefix_hit", "p50"), ("ttft_prefix_miss", "p50")]
# What a comparison leads with, by the kind of runs compared (harness/analysis/compare.py
# `kind`): measured runs, timed by the host's clock; modeled runs, the virtual clock's and
# the device model's figures; GIL runs (arms that differ by gil_mode), the primary metrics.
COMPARISON_HEADLINE = {
    "measured": [("throughput", "output_tokens"), ("ttft", "p50"), ("ttft", "p99"),
                 ("tpot", "p50"), ("tpot", "p99"), ("itl", "p50"), ("itl", "p99"),
                 ("decode_stall", "share"), *SESSION_COMPARISON, ("step_rate", "per_s"),
                 ("sched_call", "p50"), ("sched_call", "p99")],
    "modeled": [("throughput", "requests"), ("throughput", "output_tokens"),
                ("goodput", "requests"), ("goodput", "attainment"), ("ttft", "p50"),
                ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("itl", "p99"),
                ("e2e", "p50"), ("decode_stall", "share"), *SESSION_COMPARISON,
                ("achieved", "tflops_per_device"),
                ("mfu", "model"), ("dp_imbalance", "lost_share")],
    "gil": GIL_PRIMARY,
}
# Which way each metric gets worse, declared once (a name's every stat, or stat by stat):
# `steptrace history detect` calls a change that way a regression. A metric not here has no
# better way (counts, the workload's settings, utilisation, memory).
HIGHER, LOWER = "higher", "lower"  # the better direction
BETTER: Dict[str, object] = {
    **dict.fromkeys(("throughput", "goodput", "step_rate", "achieved", "mfu", "per_device"),
                    HIGHER),
    "prefix_cache": {"hit_rate": HIGHER, "hit_tokens": HIGHER},
    "session_prefix_hit": HIGHER,
    **dict.fromkeys(("ttft", "tpot", "itl", "e2e", "queueing_delay", "schedule_fidelity",
                     "decode_stall", "enqueue_drift", "delivery_delay", "frontend",
                     "sched_call", "sched_cpp", "step", "forward", "attention", "dense",
                     "experts", "dispatch", "combine", "allreduce", "dp_imbalance",
                     "kv_transfer", "decode_wait", "harness", "process_cpu", "energy",
                     "energy_per_output_token", "session_makespan", "ttft_prefix_hit",
                     "ttft_prefix_miss"), LOWER),
}


def better(metric: str, stat: str) -> Optional[str]:
    """HIGHER or LOWER: the direction in which a summary row (a pool's or a device's too)
    improves; None where BETTER declares none."""
    m = find(metric)
    declared = BETTER.get(m.name) if m is not None else None
    if isinstance(declared, dict):
        return declared.get(stat)
    if isinstance(declared, str) and m is not None and stat in m.units and stat != "count":
        return declared
    return None


TEXT_STATS = frozenset({"p50", "p99", "mean", "value", "total", "peak", "requests",
                        "output_tokens", "total_tokens", "attainment", "tflops_per_device",
                        "model", "per_step", "per_s", "cpu_share", "hit_rate", "lost_share",
                        "share", "engine_share", "gap_share", "first_turns", "later_turns"})
COUNT_UNITS = ("requests", "steps", "samples", "tokens", "blocks")  # shown as whole numbers


def markdown() -> str:
    """docs/metrics.md's summary table, rendered from SUMMARY (a device's prefix written
    gpuN_ / npuN_)."""
    lines = ["| metric | stat | unit | meaning (docs/metrics.md) |", "|---|---|---|---|"]
    for m in SUMMARY:
        by_unit: Dict[str, list] = {}
        for stat, unit in m.units.items():
            by_unit.setdefault(unit, []).append(stat)
        stat_text = " / ".join(", ".join(f"`{s}`" for s in group) for group in by_unit.values())
        name = m.name.replace(DEVICE, "gpuN_")
        lines.append(f"| `{name}` | {stat_text} | {' / '.join(by_unit)} | {m.meaning} "
                     f"(\"{m.section}\") |")
    return "\n".join(lines) + "\n"
