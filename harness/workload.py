"""A workload: one YAML file describing a run, validated whole before anything runs.

Every error names the file, the line, the key path and what was expected. docs/workloads.md
is the reference; SCHEMA below is the single source of keys, types and defaults.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from engine.block_hashes import block_size_mismatch
from engine.config import DEVICES, DTYPES, LAUNCH_US, EngineConfig, SchedulerConfig
from engine.deployment import (
    COMPUTE_PARTS,
    DEFAULT_IMBALANCE,
    DEFAULT_MEMORY_UTILIZATION,
    KV_PRECISIONS,
    Deployment,
)
from engine.devices.profile import PRECISIONS
from engine.executors.spec import ExecutorSpec, ExecutorSpecError
from engine.files import NotAFile, check_regular, not_regular
from engine.scheduler_config import FIELDS
from engine.yaml_lines import KeyPath, load_with_lines

from .arrivals import MAX_REQUESTS
from .frontend import PER_TOKEN_US
from .metrics import SLO_METRICS
from .overrides import parse_set
from .traces import FORMATS, MAX_HASH_BLOCK, TraceError, TraceResult, read_trace


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True)
class Key:
    """One workload key: its check (value -> None or raise ValueError(expected)), default."""

    check: Callable[[Any], None]
    default: Any = None
    doc: str = ""


def integer(minimum: int, allow_none: bool = False, maximum: Optional[int] = None):
    def check(v):
        if v is None and allow_none:
            return
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum \
                or (maximum is not None and v > maximum):
            rng = f">= {minimum}" if maximum is None else f"in {minimum} .. {maximum}"
            raise ValueError(f"an integer {rng}" + (" or null" if allow_none else ""))
    return check


def number(low: float, high: Optional[float] = None, allow_none: bool = False, strict=False):
    def check(v):
        if v is None and allow_none:
            return
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
        ok = ok and (v > low if strict else v >= low) and (high is None or v <= high)
        if not ok:
            rng = (f"> {low}" + ("" if high is None else f" and <= {high}") if strict
                   else f">= {low}" if high is None else f"in {low}..{high}")
            raise ValueError(f"a finite number {rng}" + (" or null" if allow_none else ""))
    return check


def one_of(*choices):
    def check(v):
        if v not in choices:
            raise ValueError("one of " + ", ".join(str(c) for c in choices))
    return check


def text(v):
    if not isinstance(v, str) or not v:
        raise ValueError("a non-empty string")


def run_name(v):
    """A run's folder under `output`: one path component, so it cannot write elsewhere, and
    short enough to be one (a file system's names hold 255 bytes)."""
    text(v)
    if v in (".", "..") or "/" in v or "\\" in v or "\0" in v:
        raise ValueError("a run name: one path component (no '/', '\\', '.' or '..')")
    if len(v.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise ValueError(f"a run name of at most {MAX_NAME_BYTES} bytes")


def boolean(v):
    if not isinstance(v, bool):
        raise ValueError("true or false")


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
    keys["num_kv_blocks"] = Key(lambda v: None if v == "auto" else blocks.check(v), "auto",
                                blocks.doc + "; auto: what device memory leaves")
    return keys


LENGTH_KINDS = ("fixed", "uniform", "lognormal")
# 10 ms of Python per streamed token is ~700x a detokenizer's measured cost: beyond it the
# frontend, not the engine, is what a run would measure
MAX_PER_TOKEN_US = 10_000.0
# 0.1 s of Python per decoder layer is 100x the measured launch cost; the launch spins with
# the GIL held, so a signal waits for the step (61 layers: 6 s at most)
MAX_LAUNCH_US = 100_000.0
MAX_NAME_BYTES = 200  # a run folder's name under it adds its stamp and arm
MAX_SPAN_S = 1e9  # a replay's arrivals span at most 31 years: beyond, float seconds go coarse
DEFAULT_KV_BLOCKS = SchedulerConfig().num_kv_blocks  # the core's pool: `auto` on a CPU

SCHEMA: Dict[str, Any] = {
    "name": Key(run_name, None, "run name (one path component); default: the file's stem"),
    "trace": {
        "file": Key(text, None, "a trace file, relative to the workload file"),
        "format": Key(one_of("auto", *FORMATS), "auto", "auto, " + ", ".join(FORMATS)),
        "drop_bad_rows": Key(boolean, False, "drop and count bad rows instead of failing"),
        "time_scale": Key(number(0, strict=True), 1.0, "arrival times are multiplied by it"),
        "limit": Key(integer(1, allow_none=True), None, "replay the first N requests only"),
        "hash_block_size": Key(integer(1, allow_none=True, maximum=MAX_HASH_BLOCK), None,
                               "tokens per hash id; default: the trace's own"),
        "generate": {
            "requests": Key(integer(1, maximum=MAX_REQUESTS), 100),
            "rate": Key(number(0, strict=True), 1.0, "requests per second"),
            "arrival": Key(one_of("poisson", "gamma", "constant"), "poisson"),
            "burstiness": Key(number(0, strict=True), 1.0, "gamma shape (vLLM's meaning)"),
            "prompt": Key(lambda v: _length(v), {"fixed": 128}),
            "output": Key(lambda v: _length(v), {"fixed": 128}),
        },
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
    "clock": Key(one_of("real", "virtual"), None, "default: virtual for modeled, else real"),
    "gil": Key(one_of("released", "held", "both"), "released", "both: a sweep, one run each"),
    "gil_aa": Key(boolean, False, "an A/A arm: released twice in every block"),
    "gil_postprocess": Key(boolean, False, "an arm with postprocess() releasing the GIL too"),
    "gil_switch_interval_s": Key(lambda v: _intervals(v), 0.005,
                                 "sys.setswitchinterval for the runs; a list sweeps it"),
    "gil_contamination_pct": Key(number(0), 10.0, "other processes' CPU + steal time (% of "
                                 "the host) above which a run is flagged contaminated"),
    "frontend": {
        "mode": Key(one_of("thread", "inline"), None, "default: thread on the real clock, "
                    "else inline"),
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
    "calibration_requests": Key(integer(0), 500, "null-engine calibration size; 0 skips it"),
    "telemetry": {
        "enabled": Key(boolean, True, "sample device and host in a separate process"),
        "interval_s": Key(number(0.01), 0.1, "seconds between samples (GPM >= 0.1, npu-smi >= 1)"),
    },
    "deployment": {
        "devices": Key(integer(1), 1, "devices per instance"),
        "attention": {
            "dp": Key(integer(1, allow_none=True), None,
                      "DP attention ranks (the scheduler's dp_size); null: devices / tp"),
            "tp": Key(integer(1), 1, "attention TP group per DP rank"),
        },
        "moe": {
            "ep": Key(integer(1, allow_none=True), None, "expert parallelism; null: devices / tp"),
            "tp": Key(integer(1), 1, "each expert split over this many devices"),
        },
        "dense": {"tp": Key(integer(1), 1, "dense FFN, shared experts, LM head; 1: replicated")},
        "micro_batches": Key(one_of(1, 2), 1, "2: two-batch overlap"),
        "precision": {
            **{part: Key(one_of(*PRECISIONS), None, "GEMMs; null: the workload's precision")
               for part in COMPUTE_PARTS},
            "kv": Key(one_of(*KV_PRECISIONS), None, "KV cache; null: bf16"),
            "dispatch": Key(one_of(*PRECISIONS), None, "payload; null: the workload's precision"),
            "combine": Key(one_of(*PRECISIONS), None, "payload; null: bf16"),
        },
        "redundant_experts": Key(integer(0), 0, "extra expert replicas (EPLB)"),
        "expert_imbalance": Key(number(1), DEFAULT_IMBALANCE,
                                "hottest device's expert load over the mean"),
        "memory_utilization": Key(number(0, 1, strict=True), DEFAULT_MEMORY_UTILIZATION,
                                  "share of HBM for weights and KV (on a torch device "
                                  "also the measured activations)"),
    },
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


@dataclass(frozen=True)
class Workload:
    path: Path
    values: Dict[str, Any]  # every key of SCHEMA, defaults filled in
    notes: Tuple[str, ...] = ()  # valid, but likely not what was meant (warm-up > the run)
    # the trace file as validation read it (every row the run replays), for the run to reuse
    trace: Optional[TraceResult] = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.values["name"]

    @property
    def trace_file(self) -> Optional[Path]:
        f = self.values["trace"]["file"]
        return (self.path.parent / f).resolve() if f else None

    @property
    def clock(self) -> str:
        return self.values["clock"]

    @property
    def gil_modes(self) -> Tuple[str, ...]:
        gil = self.values["gil"]
        return ("released", "held") if gil == "both" else (gil,)

    @property
    def arms(self) -> Tuple[str, ...]:
        """The sweep's arms: the GIL modes, and the A/A arm when asked for."""
        return self.gil_modes + (("released_aa",) if self.values["gil_aa"] else ()) \
            + (("postprocess_released",) if self.values["gil_postprocess"] else ())

    @property
    def switch_intervals(self) -> Tuple[float, ...]:
        v = self.values["gil_switch_interval_s"]
        return tuple(v) if isinstance(v, list) else (v,)

    def plan(self):
        """Every run of the sweep, in order (harness/gil_protocol.py)."""
        from .gil_protocol import plan
        return plan(self.arms, self.values["repeats"], self.switch_intervals,
                    self.values["seeds"]["protocol"])

    def engine_config(self, arm: str) -> EngineConfig:
        """The engine of one arm (harness/gil_protocol.py: released, held, ...)."""
        from .gil_protocol import ARMS
        v = self.values
        spec = executor_spec(v["device"])
        deployment = Deployment.from_values(v["deployment"], v["precision"]) \
            if spec and spec.profile else None
        # `auto` left to a torch device: the executor sizes it with the model resident (and
        # checks a given one there)
        auto = v["engine"]["num_kv_blocks"] == "auto"
        engine = {**v["engine"], "num_kv_blocks": DEFAULT_KV_BLOCKS} if auto else v["engine"]
        return EngineConfig(scheduler=SchedulerConfig(**engine), model=v["model"],
                            memory_utilization=v["deployment"]["memory_utilization"],
                            size_kv_blocks=auto,
                            deployment=deployment,
                            device="cpu" if spec else v["device"],
                            executor=str(spec or "torch"), dtype=v["dtype"],
                            precision=v["precision"], seed=v["seeds"]["engine"],
                            mtp_acceptance=v["mtp_acceptance"],
                            release_gil=ARMS[arm].schedule_released,
                            release_gil_postprocess=ARMS[arm].postprocess_released,
                            launch_us=v["emulated"]["launch_us"])


def load_workload(path, overrides: Tuple[str, ...] = ()) -> Workload:
    """Read, apply `key.path=value` overrides, check every key, fill defaults."""
    path = Path(path)
    try:
        data, lines = load_with_lines(check_regular(path))
    except NotAFile as e:
        raise WorkloadError(str(e)) from None
    except OSError as e:
        raise WorkloadError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise WorkloadError(str(e)) from None
    overridden: Dict[KeyPath, str] = {}

    def fail(key: KeyPath, message: str):
        item = next((overridden[key[:i]] for i in range(len(key), 0, -1)
                     if key[:i] in overridden), None)
        line = lines.get(key) or lines.get(key[:-1])
        where = f"--set {item!r}" if item else f"{path}:{line}" if line else str(path)
        raise WorkloadError(f"{where}: {'.'.join(key) or '(top level)'}: {message}")

    if not isinstance(data, dict):
        fail((), f"expected a mapping of workload keys, got {_show(data)}")
    for item in overrides:
        key = _apply_override(data, item)
        if key in overridden:  # as a key given twice in the file
            raise WorkloadError(f"--set {item!r}: {'.'.join(key)} is set twice (first "
                                f"--set {overridden[key]!r}); give it once")
        overridden[key] = item
    values = _validate(data, SCHEMA, (), fail)
    values["name"] = values["name"] or path.stem
    spec = executor_spec(values["device"])
    if values["clock"] is None:
        values["clock"] = "virtual" if spec and spec.modeled else "real"
    trace = values["trace"]
    given = [k for k in ("file", "generate") if (data.get("trace") or {}).get(k) is not None]
    if len(given) != 1:
        fail(("trace",), "expected exactly one of trace.file and trace.generate")
    if trace["file"]:
        why = not_regular(path.parent / trace["file"])
        if why:
            fail(("trace", "file"), f"{(path.parent / trace['file']).resolve()}: {why}")
    if values["clock"] == "real" and spec and spec.modeled:
        fail(("clock",), "a modeled device has no real clock: expected virtual")
    if values["gil_aa"] and values["gil"] == "held":
        fail(("gil_aa",), "an A/A arm repeats the released arm: expected gil: released or both")
    frontend = values["frontend"]
    if frontend["mode"] is None:
        frontend["mode"] = "thread" if values["clock"] == "real" else "inline"
    elif frontend["mode"] == "thread" and values["clock"] == "virtual":
        fail(("frontend", "mode"), "a frontend thread runs on the real clock: expected "
                                   "inline with clock: virtual")
    if "generate" not in (data.get("trace") or {}):
        trace["generate"] = None
    else:
        _check_generator(trace["generate"], fail)
    _check_model(values["model"], fail)
    _check_deployment(values, data, spec, fail)
    _check_output(values, fail)
    read = _read_trace(path.parent / trace["file"], values, fail) if trace["file"] else None
    _check_span(trace, read, fail)
    try:
        for arm in Workload(path, values).arms:
            Workload(path, values).engine_config(arm)
    except ValueError as e:  # SchedulerConfig's own checks name the field first
        field = str(e).split()[0]
        fail(("engine", field) if field in SCHEMA["engine"] else ("engine",), str(e))
    return Workload(path, values, _notes(values) + _position_notes(values, read), read)


def _check_span(trace, read: Optional[TraceResult], fail) -> None:
    """The replay's arrivals, scaled, within MAX_SPAN_S (a generated trace: its expected
    span), so that no arrival time overflows mid-run."""
    g = trace["generate"]
    span = float(read.df["arrival_s"].iloc[-1]) if read is not None else g["requests"] / g["rate"]
    scaled = span * trace["time_scale"]
    if not scaled <= MAX_SPAN_S:
        key = ("trace", "time_scale") if trace["time_scale"] != 1.0 else \
            ("trace", "file") if read is not None else ("trace", "generate", "rate")
        fail(key, f"the arrivals would span {scaled:.3g} s (time_scale {trace['time_scale']:g}"
                  f" x {span:.3g} s); a replay spans at most {MAX_SPAN_S:g} s")


def _read_trace(trace_file: Path, values, fail) -> TraceResult:
    """The trace as the run will replay it (up to the limit, every row checked, so that no
    bad row is found mid-run), and its hash block size against the engine's block size:
    one must divide the other."""
    spec = values["trace"]
    try:
        read = read_trace(trace_file, spec["format"], drop_bad_rows=spec["drop_bad_rows"],
                          limit=spec["limit"], hash_block_size=spec["hash_block_size"])
    except TraceError as e:
        fail(("trace", "file"), str(e))
    size = read.df.attrs.get("hash_block_size") if "hash_ids" in read.df.columns else None
    mismatch = size and block_size_mismatch(size, values["engine"]["block_size"])
    if mismatch:
        fail(("trace", "hash_block_size") if spec["hash_block_size"] else ("trace", "file"),
             mismatch)
    return read


def _check_generator(g, fail) -> None:
    """The generator's own checks (harness.arrivals), so that a run never finds them first."""
    for name in ("prompt", "output"):
        try:
            length_dist(g[name])
        except ValueError as e:
            fail(("trace", "generate", name), str(e))
    if g["burstiness"] != 1.0 and g["arrival"] != "gamma":
        fail(("trace", "generate", "burstiness"),
             f"a burstiness ({g['burstiness']:g}) needs arrival: gamma, got {g['arrival']}")


def length_dist(spec):
    """The arrivals.LengthDist a checked `{fixed: N}`, `{uniform: [LO, HI]}` or `{lognormal:
    {...}}` names."""
    from . import arrivals

    (kind, arg), = spec.items()
    if kind == "fixed":
        return arrivals.fixed(arg)
    if kind == "uniform":
        return arrivals.uniform(*arg)
    return arrivals.lognormal(median=arg["median"], sigma=arg["sigma"], lo=arg.get("min", 1),
                              hi=arg.get("max"))


def _check_model(name: str, fail) -> None:
    """A bundled model or a model YAML that loads, read as the engine will read it."""
    from engine.model_config import load_model_config

    try:
        load_model_config(name)
    except (ValueError, TypeError, OSError) as e:
        fail(("model",), str(e))
    except ArithmeticError as e:  # a geometry the model's own checks let through (o_groups: 0)
        fail(("model",), f"{name}: {type(e).__name__}: {e}")


def _check_deployment(values, data, spec, fail) -> None:
    """A modeled or emulated device's deployment checked against the model and the device,
    its DP degree made the scheduler's dp_size, and num_kv_blocks checked against memory
    (or, `auto`, derived from it). A torch device takes memory_utilization alone; its `auto`
    is sized when the model is on the device (engine/kv_pool.py)."""
    from engine.deployment import DeploymentError
    from engine.device_memory import DoesNotFit, kv_blocks
    from engine.model_config import load_model_config

    engine = values["engine"]
    given = data.get("engine") or {}
    if not (spec and spec.profile):
        modeled = sorted(set(data.get("deployment") or {}) - {"memory_utilization"})
        if modeled:
            fail(("deployment",), f"a deployment is modeled: expected device "
                                  f"modeled:<profile> or emulated:<profile>, got "
                                  f"{values['device']} (a torch device takes "
                                  f"deployment.memory_utilization alone, not {modeled[0]})")
        return
    model = load_model_config(values["model"])
    try:
        profile = spec.device_profile()
    except (ValueError, TypeError, OSError) as e:  # a profile YAML of the user's
        fail(("device",), str(e))
    try:
        profile.peak(values["precision"])  # MFU's peak, and the parts' default precision
    except ValueError as e:
        fail(("precision",), str(e))
    deployment = Deployment.from_values(values["deployment"], values["precision"])
    try:
        deployment.check(model, profile)
    except DeploymentError as e:
        fail(("deployment",) + e.key, e.message)
    if "dp_size" in given and given["dp_size"] != deployment.attention_dp:
        fail(("engine", "dp_size"), f"the deployment's attention.dp is {deployment.attention_dp}"
                                    f", got dp_size {given['dp_size']}: leave dp_size out")
    engine["dp_size"] = deployment.attention_dp
    sizes = (engine["block_size"], engine["max_num_seqs"])
    try:
        fit = kv_blocks(model, deployment, profile, *sizes)
    except DoesNotFit as e:
        fail(("deployment",), str(e))
    requested = engine["num_kv_blocks"]
    try:
        engine["num_kv_blocks"] = fit if requested == "auto" else \
            kv_blocks(model, deployment, profile, *sizes, requested=requested)
    except DoesNotFit as e:
        fail(("engine", "num_kv_blocks"), str(e))


def _check_output(values, fail) -> None:
    """Results go to <output>/<name>/: neither may be a file, and <name> may not be a
    symbolic link (one planted there would take the run's tables wherever it points)."""
    output = Path(values["output"])
    run_folder = output / values["name"]
    if output.is_symlink() and not output.exists():
        fail(("output",), f"{output.absolute()} is a broken symbolic link (to "
                          f"{os.readlink(output)})")
    if run_folder.is_symlink():
        fail(("output",), f"{run_folder.absolute()} is a symbolic link (to {os.readlink(run_folder)}): a "
             f"run writes only into a folder of its own; remove the link or set output to "
             f"where it points")
    for where in (output, run_folder):
        if where.exists() and not where.is_dir():
            fail(("output",), f"{where.resolve()} exists and is not a directory")


def _notes(values) -> Tuple[str, ...]:
    """What is valid but likely not meant, said before the run rather than found after it."""
    notes = ()
    if values["gil"] == "both" and values["repeats"] < 5:
        notes = (f"repeats: {values['repeats']} runs per arm; a GIL comparison needs at least "
                 f"5 (10 recommended) for an interval and a noise floor (docs/gil.md)",)
    return notes + _warmup_notes(values) + _prompt_engine_notes(values)


def _position_notes(values, read: Optional[TraceResult]) -> Tuple[str, ...]:
    """A request longer than the model's positions (max_position_embeddings) is one a
    serving engine would refuse; the harness runs it, the model's geometry notwithstanding."""
    from engine.model_config import load_model_config

    positions = load_model_config(values["model"]).max_position_embeddings
    if read is not None:
        longest = int((read.df["prompt_len"] + read.df["max_new_tokens"]).max())
    else:
        g = values["trace"]["generate"]
        bounds = [_longest(g[name]) for name in ("prompt", "output")]
        longest = None if None in bounds else sum(bounds)
    if longest is None or longest <= positions:
        return ()
    return (f"model: the trace's longest request holds {longest:,} tokens (prompt and output), "
            f"more than the model's max_position_embeddings ({positions:,}): a serving engine "
            f"would refuse it; this replay runs it",)


def _longest(length) -> Optional[int]:
    """The longest length a generator draws; None where it has no bound (lognormal)."""
    (kind, arg), = length.items()
    return arg if kind == "fixed" else arg[1] if kind == "uniform" else arg.get("max")


def _prompt_engine_notes(values) -> Tuple[str, ...]:
    """A prompt engine hands each sequence off at its first token: it never decodes."""
    engine = values["engine"]
    if engine["engine_type"] != "prompt":
        return ()
    notes = ()
    if engine["num_mtp"]:
        notes += (f"engine.num_mtp: {engine['num_mtp']} on a prompt engine, which never "
                  f"decodes: no draft is proposed or accepted (mtp_acceptance does not "
                  f"apply); only the MTP module's pass over each prompt runs, counted in "
                  f"executed FLOPs",)
    if engine["overlap"]:
        notes += ("engine.overlap: true on a prompt engine, which never decodes and reserves "
                  "no lookahead: overlap only post-processes each step one step later (a "
                  "handed-off sequence frees its blocks a step later)",)
    return notes


def _warmup_notes(values) -> Tuple[str, ...]:
    trace, warmup = values["trace"], values["warmup_steps"]
    known = [n for n in (trace["limit"], (trace["generate"] or {}).get("requests"))
             if n is not None]
    if warmup and known and warmup >= min(known):
        return (f"warmup_steps: {warmup} steps of warm-up for {min(known)} requests: warm-up "
                f"counts steps, and every request first scheduled in one is left out of the "
                f"summary; if none is left, every latency and throughput statistic is NaN",)
    return ()


def _validate(data, schema, prefix: KeyPath, fail) -> Dict[str, Any]:
    if not isinstance(data, dict):
        fail(prefix, f"expected a mapping, got {_show(data)}")
    unknown = sorted(set(data) - set(schema))
    if unknown:
        fail(prefix + (unknown[0],), f"unknown key; expected one of {', '.join(schema)}")
    out = {}
    for name, spec in schema.items():
        key = prefix + (name,)
        if isinstance(spec, dict):  # a section; `engine:` with nothing under it is empty
            section = data.get(name)
            out[name] = _validate({} if section is None else section, spec, key, fail)
            continue
        value = data.get(name, spec.default)
        if name in data:
            try:
                spec.check(value)
            except ValueError as e:
                fail(key, f"expected {e}, got {_show(value)}")
        out[name] = value
    return out


def _show(value) -> str:
    """A value as an error message quotes it: `null` for no value, long ones cut short."""
    if value is None:
        return "no value (null)"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _apply_override(data: dict, item: str) -> KeyPath:
    """--set a.b=value (harness/overrides.py) into the workload's mapping; the key path set."""
    try:
        parts, value = parse_set(item)
    except ValueError as e:
        raise WorkloadError(str(e)) from None
    node, schema = data, SCHEMA
    for part in parts[:-1]:
        schema = schema.get(part) if isinstance(schema, dict) else None
        if not isinstance(schema, dict):
            raise WorkloadError(f"--set {item!r}: {part} is not a section of a workload")
        if node.get(part) is None:  # absent, or `trace:` with nothing under it
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise WorkloadError(f"--set {item!r}: {part} is not a section")
    node[parts[-1]] = value
    return parts
