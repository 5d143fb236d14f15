"""A workload's checks across keys, run by load_workload once every key has its value:
the trace read as the run will replay it (kept for the run), the generator's lengths, the
model, the
deployment against the device's memory, where the results go. Each failure is
`fail(key path, message)`, which names the file and line (or the --set)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional

from engine.block_hashes import block_size_mismatch
from engine.deployment import Deployment
from fileio.own_folder import link_refusal, not_a_folder
from fileio.path_names import unnamable
from fileio.regular import not_regular

from ..traces.generate import length_dist, longest as longest_length
from ..traces.read import TraceError, TraceResult, read_trace
from ..traces.session_readers import SESSION_FORMATS, read_session_file
from . import real_deployment
from .schema import MAX_SPAN_S, SCHEMA, UNSET, executor_spec
from .session_checks import sessions

SCHEMA_DEFAULTS = {name: key.default for name, key in SCHEMA["engine"].items()}


def arrival_span(trace, read: Optional[TraceResult], fail) -> None:
    """The replay's arrivals, scaled, within MAX_SPAN_S (a generated trace: its expected
    span; generated sessions: their starts'), so that no arrival time overflows mid-run."""
    g = trace["generate"]
    seconds = float(read.df["arrival_s"].iloc[-1]) if read is not None \
        else (g["sessions"]["count"] if g["sessions"] else g["requests"]) / g["rate"]
    scaled = seconds * trace["time_scale"]
    if not scaled <= MAX_SPAN_S:
        key = ("trace", "time_scale") if trace["time_scale"] != 1.0 else \
            ("trace", "file") if read is not None else ("trace", "generate", "rate")
        fail(key, f"the arrivals would span {scaled:.3g} s (time_scale {trace['time_scale']:g}"
                  f" x {seconds:.3g} s); a replay spans at most {MAX_SPAN_S:g} s")


def replayed_trace(trace_file: Path, values, fail) -> TraceResult:
    """The trace as the run will replay it (up to the limit, every row checked, so that no
    bad row is found mid-run), and its hash block size against the engine's block size:
    one must divide the other."""
    spec = values["trace"]
    try:
        read = read_session_file(trace_file, spec["format"], spec["hash_block_size"],
                                 values["engine"]["block_size"]) \
            if spec["format"] in SESSION_FORMATS else \
            read_trace(trace_file, spec["format"], drop_bad_rows=spec["drop_bad_rows"],
                       limit=spec["limit"], hash_block_size=spec["hash_block_size"])
    except TraceError as e:
        fail(("trace", "file"), str(e))
    size = read.df.attrs.get("hash_block_size") if "hash_ids" in read.df.columns else None
    mismatch = size and block_size_mismatch(size, values["engine"]["block_size"])
    if mismatch:
        fail(("trace", "hash_block_size") if spec["hash_block_size"] else ("trace", "file"),
             mismatch)
    return read


def generator(g, fail) -> None:
    """The generator's own checks (harness/traces/generate.py), so that a run never finds
    them first."""
    for name in ("prompt", "output"):
        try:
            length_dist(g[name])
        except ValueError as e:
            fail(("trace", "generate", name), str(e))
    if g["burstiness"] != 1.0 and g["arrival"] != "gamma":
        fail(("trace", "generate", "burstiness"),
             f"a burstiness ({g['burstiness']:g}) needs arrival: gamma, got {g['arrival']}")


def model(name: str, fail) -> None:
    """A bundled model or a model YAML that loads, read as the engine will read it."""
    from engine.model_config import load_model_config

    try:
        load_model_config(name)
    except (ValueError, TypeError, OSError) as e:
        fail(("model",), str(e))
    except ArithmeticError as e:  # a geometry the model's own checks let through (o_groups: 0)
        fail(("model",), f"{name}: {type(e).__name__}: {e}")


def deployment_fits(values, data, spec, fail) -> None:
    """A modeled or emulated device's deployment checked against the model and the device,
    its DP degree made the scheduler's dp_size, and num_kv_blocks checked against memory
    (or, `auto`, derived from it). A torch device takes memory_utilization alone; its `auto`
    is sized when the model is on the device (engine/kv_pool.py)."""
    engine = values["engine"]
    given = data.get("engine") or {}
    if disaggregated(values, data, spec, fail):
        return
    if spec is None:  # a torch device: its devices are engine processes
        real_deployment.check(values, data, fail)
        return
    if not spec.profile:
        modeled = sorted(set(data.get("deployment") or {}) - {"memory_utilization"})
        if modeled:
            fail(("deployment",), f"a deployment is modeled: expected device "
                                  f"modeled:<profile> or emulated:<profile>, got "
                                  f"{values['device']} (a torch device takes "
                                  f"deployment.memory_utilization alone, not {modeled[0]})")
        return
    fit_layout(values, values["deployment"], engine, given, spec, ("deployment",), fail)


def fit_layout(values, section, engine, given, spec, key, fail):
    """One instance's layout (the `deployment:` section, or a pool's, at `key`) checked
    against the model and its device, its DP degree made `engine`'s dp_size, and `engine`'s
    num_kv_blocks checked against memory (or, `auto`, derived from it). Returns the
    Deployment and the device profile."""
    from engine.deployment import DeploymentError
    from engine.device_memory import DoesNotFit, kv_blocks
    from engine.model_config import load_model_config

    model = load_model_config(values["model"])
    device_key = key + ("device",) if key != ("deployment",) else ("device",)
    try:
        profile = spec.device_profile()
    except (ValueError, TypeError, OSError) as e:  # a profile YAML of the user's
        fail(device_key, str(e))
    try:
        profile.peak(values["precision"])  # MFU's peak, and the parts' default precision
    except ValueError as e:
        fail(("precision",), str(e))
    deployment = Deployment.from_values(section, values["precision"])
    try:
        deployment.check(model, profile)
    except DeploymentError as e:
        fail(key + e.key, e.message)
    if "dp_size" in given and given["dp_size"] != deployment.attention_dp:
        fail(("engine", "dp_size"), f"the deployment's attention.dp is {deployment.attention_dp}"
                                    f", got dp_size {given['dp_size']}: leave dp_size out")
    engine["dp_size"] = deployment.attention_dp
    sizes = (engine["block_size"], engine["max_num_seqs"])
    try:
        fit = kv_blocks(model, deployment, profile, *sizes)
    except DoesNotFit as e:
        fail(key, str(e))
    requested = engine["num_kv_blocks"]
    try:
        engine["num_kv_blocks"] = fit if requested == "auto" else \
            kv_blocks(model, deployment, profile, *sizes, requested=requested)
    except DoesNotFit as e:
        fail(key + ("engine", "num_kv_blocks") if key != ("deployment",)
             else ("engine", "num_kv_blocks"), str(e))
    return deployment, profile


ONE_STEP = "each instance steps on its own clock, one step at a time"


def disaggregated(values, data, spec, fail) -> bool:
    """A P/D deployment (`deployment.prefill` and `.decode`), checked: a modeled or a torch
    device (real_deployment.check_pd: instances as processes), no co-located layout beside
    the pools, each pool's layout and memory, the link on both pools' devices. Each pool's
    `engine` becomes the whole engine its instances run: the workload's, the pool's keys
    over it, engine_type and dp_size set. False (and the P/D keys None) for a co-located
    deployment."""
    from engine.deployment import DeploymentError
    from engine.disaggregation import ROLES, Disaggregation, from_values

    section = values["deployment"]
    if not _pd_given(section, data.get("deployment") or {}, fail):
        return False
    if spec is not None and not spec.modeled:
        fail(("device",), f"a P/D deployment is modeled or runs on a torch device: expected "
                          f"modeled:<profile>, cpu, cuda, npu or auto, got {values['device']}")
    own = _pool_engines(values, data, fail)
    if spec is None:  # a torch device: every instance an engine process
        real_deployment.check_pd(values, data, fail)
        return True
    profiles = {}
    for role in ROLES:
        pool, key = section[role], ("deployment", role)
        pool_spec = executor_spec(pool["device"]) if pool["device"] else spec
        if not (pool_spec and pool_spec.modeled):
            fail(key + ("device",), f"expected modeled:<profile>, got {pool['device']}")
        _, profiles[role] = fit_layout(values, pool, pool["engine"], own[role], pool_spec, key,
                                       fail)
    try:
        Disaggregation.check(from_values(section, values["device"], values["precision"]),
                             profiles)
    except DeploymentError as e:
        fail(("deployment",) + e.key, e.message)
    return True


def _pool_engines(values, data, fail) -> Dict[str, Dict[str, Any]]:
    """Each pool's `engine` made the whole engine its instances run (the pool's own keys
    returned, by role); what a P/D deployment sets itself, or cannot run, refused."""
    from engine.disaggregation import ENGINE_TYPES, ROLES

    given = data.get("engine") or {}
    for name, why in (("engine_type", "each pool sets its own (prompt, completion)"),
                      ("overlap", ONE_STEP)):
        if name in given and given[name] != SCHEMA_DEFAULTS[name]:
            fail(("engine", name), f"a P/D deployment: {why}")
    own = {}
    for role in ROLES:
        pool = values["deployment"][role]
        own[role] = {k: v for k, v in pool["engine"].items() if v is not UNSET}  # given
        if own[role].get("overlap"):
            fail(("deployment", role, "engine", "overlap"), f"{ONE_STEP}: expected false")
        pool["engine"] = {**values["engine"], **own[role], "engine_type": ENGINE_TYPES[role]}
    return own


def _pd_given(section, written, fail) -> bool:
    """Whether the workload gives both pools (one alone, or P/D keys without them, or
    co-located keys beside them, refused); without pools, the P/D keys set to None."""
    from engine.disaggregation import ROLES

    pools = [role for role in ROLES if written.get(role) is not None]
    if not pools:
        for key in ("kv_transfer", "router"):
            if written.get(key) is not None:
                fail(("deployment", key), "only a P/D deployment takes it: expected "
                                          "deployment.prefill and deployment.decode beside it")
        for key in (*ROLES, "kv_transfer", "router"):
            section[key] = None
        return False
    if len(pools) == 1:
        other = ROLES[1 - ROLES.index(pools[0])]
        fail(("deployment", other), f"a P/D deployment needs both pools; "
                                    f"deployment.{pools[0]} is given, {other} is not")
    colocated = sorted(set(written) - {*ROLES, "kv_transfer", "router"})
    if colocated:
        fail(("deployment", colocated[0]), "a P/D deployment lays out each pool in its own "
                                           "section: expected it under deployment.prefill "
                                           "or deployment.decode")
    return True


def output(values, fail) -> None:
    """Results go to <output>/<name>/: neither may be a file, and <name> may not be a
    symbolic link (one planted there would take the run's tables wherever it points)."""
    output = Path(values["output"])
    run_folder = output / values["name"]
    why = unnamable(run_folder)
    if why:
        fail(("output",), f"{str(output)!r} cannot hold a run folder: the path {why}")
    if output.is_symlink() and not output.exists():
        fail(("output",), f"{output.absolute()} is a broken symbolic link (to "
                          f"{os.readlink(output)})")
    why = link_refusal(run_folder.absolute(), "a run writes")
    if why:
        fail(("output",), why)
    for where in (output, run_folder):
        why = not_a_folder(where, where.resolve())
        if why:
            fail(("output",), why)


def load_mode(values, fail) -> None:
    """A closed loop (load.mode: concurrency) releases a request when one leaves: it needs
    its window, and an inline frontend (a frontend thread enqueues at trace times)."""
    load, frontend = values["load"], values["frontend"]
    if load["mode"] != "concurrency":
        if load["concurrency"] is not None:
            fail(("load", "concurrency"), f"only load.mode: concurrency takes it, and "
                                          f"load.mode is {load['mode']}")
        return
    if load["concurrency"] is None:
        fail(("load", "concurrency"), "load.mode: concurrency needs the requests in flight: "
                                      "expected an integer >= 1")
    if frontend["mode"] == "thread":
        fail(("frontend", "mode"), "a frontend thread enqueues at the trace's arrival times; "
                                   "a closed loop releases a request when one leaves: "
                                   "expected inline with load.mode: concurrency")
    frontend["mode"] = "inline"


def derived(values, data, spec, path: Path, fail) -> None:
    """The keys whose default depends on others (clock, frontend.mode, the trace's one
    source, its sessions', a target's), set, and their combinations checked."""
    sessions(values, data, path, fail)
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
    if "generate" not in (data.get("trace") or {}):
        trace["generate"] = None
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
    target(values, data, fail)


def tokens(values, spec, fail) -> None:
    """The tokens table and greedy sampling need an engine that samples tokens: a torch
    device's."""
    for key, value, default in (("tokens", values["tokens"], False),
                                ("sampling", values["sampling"], "engine")):
        if value != default and spec is not None:
            fail((key,), f"a {values['device']} device samples no tokens: expected a torch "
                         f"device (cpu, cuda, npu, auto) or {key}: {default}")


def replay_loop(values, spec, fail) -> None:
    """`replay_loop` resolved to the loop that runs (docs/architecture.md, "Two replay
    loops"): `auto` is the C++ loop wherever it can replay the workload, else Python; `cpp`
    where it cannot is refused."""
    why = cpp_loop_refusal(values, spec)
    if values["replay_loop"] == "cpp" and why:
        fail(("replay_loop",), f"the C++ loop cannot replay this workload: {why}; expected "
                               f"auto or python")
    if values["replay_loop"] == "auto":
        values["replay_loop"] = "python" if why else "cpp"


def cpp_loop_refusal(values, spec) -> Optional[str]:
    """Why the C++ loop cannot replay these workload values; None where it can."""
    if not (spec and spec.modeled):
        return f"it replays a modeled device on the virtual clock, not {values['device']}"
    if values["gil"] != "released" or values["gil_postprocess"]:
        return "the GIL's arms are compared in the Python loop, where holding it matters"
    return None


def decode_room(pool, read: Optional[TraceResult], values, fail) -> None:
    """A decode instance's DP rank must hold the KV of the replay's longest prompt (with
    its first token and lookahead): else that request could never be decoded."""
    from engine.scheduler_config import SchedulerConfig

    longest = int(read.df["prompt_len"].max()) if read is not None \
        else longest_length(values["trace"]["generate"]["prompt"])
    if longest is None:  # a lognormal without a bound
        return
    if pool.engine["num_kv_blocks"] == "auto":  # a torch device's, sized on the device
        return
    engine = SchedulerConfig(**pool.engine)
    tokens = longest + max(1, engine.lookahead)
    blocks = -(-tokens // engine.block_size)
    if blocks > engine.num_kv_blocks:
        fail(("deployment", "decode"), f"a decode DP rank's KV pool holds {engine.num_kv_blocks}"
                                       f" blocks of {engine.block_size} tokens; the longest "
                                       f"prompt ({longest:,} tokens) needs {blocks}")


def target(values, data, fail) -> None:
    """A run against an endpoint (`target:`, harness/replay/client.py): its endpoint and
    model given, on the real clock with no frontend thread (the client is the frontend);
    the section null where the workload leaves it out."""
    if "target" not in data:
        values["target"] = None
        return
    given = data.get("target") or {}
    for key in ("endpoint", "model"):
        if given.get(key) is None:
            fail(("target", key), "a target needs its endpoint (an http:// or https:// URL) "
                                  "and the model its requests ask for")
    if data.get("clock") == "virtual":
        fail(("clock",), "a run against an endpoint is on the real clock: expected real")
    if (data.get("frontend") or {}).get("mode") == "thread":
        fail(("frontend", "mode"), "a run against an endpoint has no frontend thread (its "
                                   "client streams the tokens): expected inline")
    for key, default, why in (("tokens", False, "it receives text, not token ids"),
                              ("warmup_steps", 0, "it has no engine steps to warm up"),
                              ("gil", "released", "the GIL's arms are its engine's"),
                              ("gil_aa", False, "the GIL's arms are its engine's"),
                              ("gil_postprocess", False, "the GIL's arms are its engine's")):
        if values[key] != default:
            fail((key,), f"a run against an endpoint takes no {key}: {why}; expected "
                         f"{str(default).lower()}")
    values["clock"], values["frontend"]["mode"] = "real", "inline"
