"""A workload's keys: SCHEMA, the single source of every key's check, type, default and
meaning (docs/workloads.md is the reference, and tests/test_contracts.py holds the two
together; harness/workload/views.py makes each section a typed view); the `engine:` and
`deployment:` sections are built from the engine's own declarations. A check takes a value
and raises ValueError(what was expected) or returns None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional
from urllib.parse import urlsplit

from engine.config import DEVICES, DTYPES, LAUNCH_US, SAMPLINGS, SchedulerConfig
from engine.deployment import Deployment, Setting
from engine.devices.profile import PRECISIONS
from engine.disaggregation import DECODE_ROUTERS, LINKS, PREFILL_ROUTERS
from engine.executors.spec import ExecutorSpec, ExecutorSpecError
from engine.scheduler_config import FIELDS

from ..schema.values import SLO_METRICS
from ..traces.generate import MAX_REQUESTS
from ..traces.read import FORMATS, MAX_HASH_BLOCK, TraceError
from ..traces.session_gen import gap_dist
from ..traces.session_readers import SESSION_FORMATS

# Python work per token standing in for incremental detokenization and streaming, in us:
# the median of tests/bench/detokenize_cost.py on the shared 2-core development host,
# 2026-12-01 (docs/gil.md).
PER_TOKEN_US = 13.6

@dataclass(frozen=True)
class Check:
    """A key's check (value -> None or raise ValueError(expected)) and the type of the values
    it lets through, as a stub writes it (harness/workload/views.pyi)."""

    test: Callable[[Any], None]
    type: str

    def __call__(self, v) -> None:
        self.test(v)


def typed(annotation: str) -> Callable[[Callable[[Any], None]], Check]:
    """A check function made a Check letting through `annotation`."""
    return lambda test: Check(test, annotation)


def _or_null(annotation: str, allow_none: bool) -> str:
    return f"Optional[{annotation}]" if allow_none else annotation


@dataclass(frozen=True)
class Key:
    """One workload key: its check, default and meaning. A null default stays null once the
    workload is loaded, unless `resolved`: checks.py then sets it from other keys."""

    check: Check
    default: Any = None
    doc: str = ""
    resolved: bool = False


class NullableSection(dict):
    """A section that is null once the workload is loaded where the workload leaves it out
    (checks.py: trace.generate beside a trace file, the P/D keys of a co-located
    deployment)."""


def integer(minimum: int, allow_none: bool = False, maximum: Optional[int] = None) -> Check:
    def check(v):
        if v is None and allow_none:
            return
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum \
                or (maximum is not None and v > maximum):
            rng = f">= {minimum}" if maximum is None else f"in {minimum} .. {maximum}"
            raise ValueError(f"an integer {rng}" + (" or null" if allow_none else ""))
    return Check(check, _or_null("int", allow_none))


def number(low: float, high: Optional[float] = None, allow_none: bool = False,
           strict=False) -> Check:
    def check(v):
        if v is None and allow_none:
            return
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
        ok = ok and (v > low if strict else v >= low) and (high is None or v <= high)
        if not ok:
            rng = (f"> {low}" + ("" if high is None else f" and <= {high}") if strict
                   else f">= {low}" if high is None else f"in {low}..{high}")
            raise ValueError(f"a finite number {rng}" + (" or null" if allow_none else ""))
    return Check(check, _or_null("float", allow_none))


def one_of(*choices) -> Check:
    def check(v):
        if v not in choices:
            raise ValueError("one of " + ", ".join(str(c) for c in choices))
    return Check(check, f"Literal[{', '.join(map(repr, choices))}]")


@typed("str")
def text(v):
    if not isinstance(v, str) or not v:
        raise ValueError("a non-empty string")


def word(allow_none: bool = False) -> Check:
    def check(v):
        if v is None and allow_none:
            return
        if not isinstance(v, str) or not v.isprintable() or not v or len(v.split()) != 1 \
                or len(v) > 64:
            raise ValueError("one word of at most 64 characters" +
                             (" or null" if allow_none else ""))
    return Check(check, _or_null("str", allow_none))


@typed("str")
def run_name(v):
    """A run's folder under `output`: one path component, so it cannot write elsewhere, and
    short enough to be one (a file system's names hold 255 bytes)."""
    text(v)
    if v in (".", "..") or "/" in v or "\\" in v or "\0" in v:
        raise ValueError("a run name: one path component (no '/', '\\', '.' or '..')")
    if len(v.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise ValueError(f"a run name of at most {MAX_NAME_BYTES} bytes")


@typed("Optional[str]")
def http_url(v):
    """An endpoint's URL: http or https, a host, no user or password in it (the manifest
    records it)."""
    if v is None:
        return
    try:
        parts = urlsplit(v) if isinstance(v, str) else None
        port = parts.port if parts else None  # raises ValueError past 65535
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.username is not None or not v.isprintable() or port == 0:
        raise ValueError("an http:// or https:// URL with a host and no credentials")


def env_name(v):
    if v is None:
        return
    if not isinstance(v, str) or not v or len(v) > 128 \
            or not (v[0].isalpha() or v[0] == "_") \
            or not all(c.isascii() and (c.isalnum() or c == "_") for c in v):
        raise ValueError("an environment variable's name (letters, digits, _) or null")


@typed("bool")
def boolean(v):
    if not isinstance(v, bool):
        raise ValueError("true or false")


@typed("str")
def device(v):
    """A torch device, or an executor spec with a device profile (modeled:<profile>)."""
    if isinstance(v, str) and ":" in v:
        try:
            ExecutorSpec.parse(v, "device")
        except ExecutorSpecError as e:
            raise ValueError(e.expected) from None
        return
    one_of(*DEVICES)(v)


def executor_spec(device_value: str) -> Optional[ExecutorSpec]:
    """The executor a `device` value names, or None for a torch device."""
    return ExecutorSpec.parse(device_value, "device") if ":" in device_value else None


def _scheduler_keys() -> Dict[str, Key]:
    """SchedulerConfig's fields, as the C++ core declares them (csrc/config.hpp); a choice
    is checked by SchedulerConfig itself, its error naming the allowed values.
    num_kv_blocks may also be `auto` (the default): derived from device memory."""
    checks = {"bool": lambda f: boolean, "str": lambda f: text,
              "int": lambda f: integer(f["minimum"], allow_none=f["default"] is None)}
    keys = {f["name"]: Key(checks[f["type"]](f), f["default"], f["doc"]) for f in FIELDS}
    blocks = keys["num_kv_blocks"]
    keys["num_kv_blocks"] = Key(Check(lambda v: None if v == "auto" else blocks.check(v),
                                      "Union[int, Literal['auto']]"), "auto",
                                blocks.doc + "; auto: what device memory leaves")
    return keys


def _deployment_keys() -> Dict[str, Any]:
    """Deployment's fields as the `deployment:` section: each key's check, default and
    meaning as engine/deployment.py declares them."""
    section: Dict[str, Any] = {}
    for setting, default in Deployment.settings():
        *parents, name = setting.key.split(".")
        node = section
        for parent in parents:
            node = node.setdefault(parent, {})
        node[name] = Key(_setting_check(setting), default, setting.meaning)
    return section


def _pool_keys(role: str) -> Dict[str, Any]:
    """A P/D pool's section: its instances, device and engine keys over the workload's,
    and every key of a co-located deployment."""
    return {"instances": Key(integer(1), 1, f"{role} instances, identical"),
            "device": Key(Check(lambda v: None if v is None else device(v), "Optional[str]"),
                          None, "modeled:<profile>; null: the workload's device"),
            "engine": PoolEngine(),
            **_deployment_keys()}


class _Unset:
    def __repr__(self) -> str:
        return "unset"


UNSET = _Unset()  # a pool's engine key not given: the workload's `engine:` value stands


class PoolEngine(dict):
    """A P/D pool's `engine:` section: the workload's engine keys, each checked as under
    `engine:`, over the workload's for the pool's instances, so that `--set` and a sweep's
    axes set them one by one (deployment.decode.engine.max_num_seqs). A key not given is
    UNSET (checks.py's _pool_engines keeps the given ones); engine_type and dp_size are
    the pool's to set."""

    def __init__(self) -> None:
        super().__init__({name: Key(Check(_pools_own(name), key.check.type)
                                    if name in POOL_SETS else key.check, UNSET, key.doc)
                          for name, key in _scheduler_keys().items()})


POOL_SETS = {"engine_type": "prompt for prefill, completion for decode",
             "dp_size": "its DP width is attention.dp"}


def _pools_own(name: str) -> Callable[[Any], None]:
    def check(v):
        raise ValueError(f"it left out: the pool sets {name} itself ({POOL_SETS[name]})")
    return check


@typed(f"Union[Literal[{', '.join(map(repr, LINKS))}], float]")
def _link(v) -> None:
    if v in LINKS:
        return
    try:
        number(0, strict=True)(v)
    except ValueError:
        raise ValueError(f"one of {', '.join(LINKS)}, or GB/s per device (a number > 0)") \
            from None


def _disaggregation_keys() -> Dict[str, Any]:
    """The P/D keys of `deployment:` (engine/disaggregation.py)."""
    return {
        "prefill": NullableSection(_pool_keys("prefill")),
        "decode": NullableSection(_pool_keys("decode")),
        "kv_transfer": NullableSection({
            "link": Key(_link, "scaleout", "scaleout, scaleup, or GB/s per device"),
            "latency_us": Key(number(0), 20.0, "per transfer, before its first byte"),
            "layerwise": Key(boolean, True, "stream layer by layer with the prefill"),
        }),
        "router": NullableSection({
            "prefill": Key(one_of(*PREFILL_ROUTERS), "round_robin",
                           "which prefill instance takes a request"),
            "decode": Key(one_of(*DECODE_ROUTERS), "round_robin",
                          "which decode instance takes a prefilled sequence"),
        }),
    }


def _setting_check(s: Setting) -> Check:
    if s.choices:
        return one_of(*s.choices)
    if s.word:
        return word(allow_none=s.null)
    if s.number:
        return number(s.low, s.high, allow_none=s.null, strict=s.strict)
    return integer(int(s.low), allow_none=s.null)


# A collective's timeout, s: under a second a rank's first collectives (the group joined,
# the model built on the others) fail before they can complete; past a day it is no
# timeout (and past about 3e12 s the process group's timedelta overflows).
COLLECTIVE_TIMEOUT_S = (1.0, 86_400.0)
LENGTH_KINDS = ("fixed", "uniform", "lognormal")
LOAD_MODES = ("trace", "concurrency", "offline", "sessions")
# 10 ms of Python per streamed token is ~700x a detokenizer's measured cost: beyond it the
# frontend, not the engine, is what a run would measure
MAX_PER_TOKEN_US = 10_000.0
# 0.1 s of Python per decoder layer is 100x the measured launch cost; the launch spins with
# the GIL held, so a signal waits for the step (61 layers: 6 s at most)
MAX_LAUNCH_US = 100_000.0
MAX_NAME_BYTES = 200  # a run folder's name under it adds its stamp and arm
MAX_SPAN_S = 1e9  # a replay's arrivals span at most 31 years: beyond, float seconds go coarse
DEFAULT_KV_BLOCKS = SchedulerConfig().num_kv_blocks  # the core's pool: `auto` on a CPU
# a request-length distribution: {fixed: N}, {uniform: [LO, HI]}, {lognormal: {...}}
LENGTH = Check(lambda v: _length(v), "Dict[str, Any]")
# think or tool time: {fixed: S}, {exponential: {mean_s: S}}, {lognormal: {...}}
GAP = Check(lambda v: _gap(v), "Dict[str, Any]")


SCHEMA: Dict[str, Any] = {
    "name": Key(run_name, None, "run name (one path component); default: the file's stem",
                resolved=True),
    "trace": {
        "file": Key(text, None, "a trace file, relative to the workload file"),
        "format": Key(one_of("auto", *FORMATS, *SESSION_FORMATS), "auto",
                      "auto, " + ", ".join(FORMATS + SESSION_FORMATS)),
        "drop_bad_rows": Key(boolean, False, "drop and count bad rows instead of failing"),
        "time_scale": Key(number(0, strict=True), 1.0, "arrival times are multiplied by it"),
        "limit": Key(integer(1, allow_none=True), None, "replay the first N requests only"),
        "hash_block_size": Key(integer(1, allow_none=True, maximum=MAX_HASH_BLOCK), None,
                               "tokens per hash id; default: the trace's own"),
        "generate": NullableSection({
            "requests": Key(integer(1, maximum=MAX_REQUESTS), 100),
            "rate": Key(number(0, strict=True), 1.0, "requests per second"),
            "arrival": Key(one_of("poisson", "gamma", "constant"), "poisson"),
            "burstiness": Key(number(0, strict=True), 1.0, "gamma shape (vLLM's meaning)"),
            "prompt": Key(LENGTH, {"fixed": 128}),
            "output": Key(LENGTH, {"fixed": 128}),
            "shared_prefix": {
                "groups": Key(integer(1, allow_none=True, maximum=1 << 30), None,
                              "groups sharing a prefix (null: none)"),
                "tokens": Key(integer(1, maximum=1 << 29), 1024,
                              "the shared prefix's tokens, ahead of each prompt"),
            },
            "sessions": NullableSection({
                "count": Key(integer(1, maximum=MAX_REQUESTS), 10, "sessions"),
                "turns": Key(LENGTH, {"uniform": [2, 8]}, "main turns per session"),
                "system_prompt": Key(integer(0, maximum=1 << 29), 4096,
                                     "tokens ahead of every session's first input, shared"),
                "input": Key(LENGTH, {"uniform": [50, 500]}, "a turn's new input tokens"),
                "tool_gap": Key(GAP, {"exponential": {"mean_s": 1.0}}),
                "user_gap": Key(GAP, {"lognormal": {"median_s": 10.0, "sigma": 1.0}}),
                "tool_share": Key(number(0, 1), 0.8, "a later turn's chance of following a "
                                  "tool call (else the user)"),
                "fanout": {
                    "probability": Key(number(0, 1), 0.0,
                                       "a main turn's chance of spawning sub-agents"),
                    "children": Key(integer(1, maximum=1024), 2, "sub-agents spawned"),
                    "turns": Key(integer(1, maximum=1024), 2, "each sub-agent's turns"),
                },
            }),
        }),
    },
    "target": NullableSection({
        "endpoint": Key(http_url, None, "an OpenAI-compatible server's base URL (http or "
                        "https): the run sends it the trace's requests, no engine here"),
        "model": Key(Check(lambda v: None if v is None else text(v), "Optional[str]"), None,
                     "the model name the requests ask for"),
        "api": Key(one_of("completions", "chat"), "completions",
                   "completions: token-id prompts; chat: a prompt of prompt_len words"),
        "api_key_env": Key(Check(env_name, "Optional[str]"), None,
                           "the environment variable holding the API key (a bearer token); "
                           "null: none sent"),
        "timeout_s": Key(number(0, strict=True), 600.0,
                         "a request's longest wait, its stream included"),
        "metrics_interval_s": Key(number(0, strict=True, allow_none=True), 1.0,
                                  "how often the endpoint's /metrics is scraped into the "
                                  "server table; null: never"),
    }),
    "load": {
        "mode": Key(one_of(*LOAD_MODES), "trace", "trace: the trace's arrivals; concurrency: "
                    "a closed loop of `concurrency` requests in flight; offline: every request "
                    "at 0; sessions: a closed loop of `sessions` live sessions"),
        "concurrency": Key(integer(1, allow_none=True), None,
                           "requests in flight (load.mode: concurrency)"),
        "sessions": Key(integer(1, allow_none=True), None,
                        "sessions live at a time (load.mode: sessions)"),
    },
    "engine": _scheduler_keys(),
    "model": Key(text, "tiny", "a bundled model (engine/models) or a YAML path"),
    "device": Key(device, "auto", "auto, cpu, cuda, npu, modeled:<profile> or emulated:<profile>"),
    "emulated": {
        "launch_us": Key(number(0, MAX_LAUNCH_US), LAUNCH_US,
                         "host cost of launching one decoder layer"),
    },
    "dtype": Key(one_of(*DTYPES), "float32"),
    "precision": Key(one_of(*PRECISIONS), "bf16", "peak used for MFU and modeled devices"),
    "mtp_acceptance": Key(number(0, 1, allow_none=True), 0.8),
    "sampling": Key(one_of(*SAMPLINGS), "engine", "greedy: tokens independent of batching "
                    "(a float64 forward, MTP drafts verified, prompts seeded per request)"),
    "tokens": Key(boolean, False, "write the tokens table: every output token of every "
                  "request (a torch device)"),
    "collective_timeout_s": Key(number(*COLLECTIVE_TIMEOUT_S), 300.0, "rank processes: "
                                "a collective not completed within it fails the run"),
    "clock": Key(one_of("real", "virtual"), None, "default: virtual for modeled, else real",
                 resolved=True),
    "replay_loop": Key(one_of("auto", "cpp", "python"), "auto",
                       "auto: the C++ loop wherever it can replay the workload, else Python"),
    "gil": Key(one_of("released", "held", "both"), "released", "both: a sweep, one run each"),
    "gil_aa": Key(boolean, False, "an A/A arm: released twice in every block"),
    "gil_postprocess": Key(boolean, False, "an arm with postprocess() releasing the GIL too"),
    "gil_switch_interval_s": Key(Check(lambda v: _intervals(v), "Union[float, List[float]]"),
                                 0.005,
                                 "sys.setswitchinterval for the runs; a list sweeps it"),
    "gil_contamination_pct": Key(number(0), 10.0, "other processes' CPU + steal time (% of "
                                 "the host) above which a run is flagged contaminated"),
    "frontend": {
        "mode": Key(one_of("thread", "inline"), None, "default: thread on the real clock, "
                    "else inline", resolved=True),
        "per_token_us": Key(number(0, MAX_PER_TOKEN_US), PER_TOKEN_US,
                            "the frontend's Python work per token"),
    },
    "slo": {name: Key(number(0, strict=True, allow_none=True), None,
                      f"{name} limit in seconds: goodput counts requests within every limit")
            for name in SLO_METRICS},
    "warmup_steps": Key(integer(0), 0, "recorded, flagged, left out of summaries"),
    "repeats": Key(integer(1), 1),
    "seeds": {
        "arrivals": Key(integer(0), 0),
        "lengths": Key(integer(0), 0),
        "engine": Key(integer(0), 0, "weights, synthetic prompts, MTP acceptance"),
        "protocol": Key(integer(0), 0, "the order of the arms in each block of a sweep"),
    },
    "calibration_requests": Key(integer(0, allow_none=True), None,
                                "null-engine calibration size; 0 skips it; default: 500 on the "
                                "real clock, 0 on the virtual one"),
    "telemetry": {
        "enabled": Key(boolean, True, "sample device and host in a separate process"),
        "interval_s": Key(number(0.01), 0.1, "seconds between samples (GPM >= 0.1, npu-smi >= 1)"),
    },
    "deployment": {**_deployment_keys(), **_disaggregation_keys()},
    "output": Key(text, "results", "results folder, relative to the working directory"),
    "table_format": Key(one_of("parquet", "csv"), "parquet"),
}


def _intervals(v):
    values = v if isinstance(v, list) else [v]
    if not values or any(isinstance(x, bool) or not isinstance(x, (int, float))
                         or not math.isfinite(x) or x <= 0 for x in values):
        raise ValueError("a number of seconds > 0, or a non-empty list of them")


def _length(v):
    if not (isinstance(v, dict) and len(v) == 1 and next(iter(v)) in LENGTH_KINDS):
        raise ValueError("one of {fixed: N}, {uniform: [LO, HI]}, "
                         "{lognormal: {median: M, sigma: S}}")
    kind, arg = next(iter(v.items()))
    if kind == "fixed":
        integer(1)(arg)
    elif kind == "uniform":
        if not (isinstance(arg, list) and len(arg) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in arg)
                and arg[0] <= arg[1]):
            raise ValueError("uniform: [LO, HI] with 1 <= LO <= HI")
    elif not (isinstance(arg, dict) and set(arg) <= {"median", "sigma", "min", "max"}
              and {"median", "sigma"} <= set(arg)
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
                      and math.isfinite(x) for x in arg.values())
              and all(isinstance(arg.get(k, 1), int) for k in ("min", "max"))
              and arg.get("min", 1) <= arg.get("max", arg.get("min", 1))):
        raise ValueError("lognormal: {median: M, sigma: S[, min: A, max: B]} with finite "
                         "numbers > 0, integers 1 <= A <= B")


def _gap(v):
    try:
        gap_dist(v)
    except TraceError:
        raise ValueError("{fixed: S}, {exponential: {mean_s: S}} or {lognormal: {median_s: S, "
                         "sigma: X}}, numbers >= 0 (a median > 0)") from None
