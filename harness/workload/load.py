"""A workload: one YAML file describing a run, validated whole before anything runs.

Every error names the file, the line, the key path and what was expected. docs/workloads.md
is the reference; harness/workload/schema.py's SCHEMA is the single source of keys, types and
defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from engine import disaggregation
from engine.config import EngineConfig, SchedulerConfig
from engine.deployment import Deployment
from engine.disaggregation import Disaggregation, Pool
from fileio.regular import NotAFile, check_regular
from fileio.yaml_lines import KeyPath, load_with_lines

from ..io.one_word import commit_variables
from ..traces.read import TraceResult
from ..traces.sessions import is_sessions
from . import checks, session_checks
from .arms import ARMS
from .notes import notes
from .overrides import parse_set
from .schema import DEFAULT_KV_BLOCKS, SCHEMA, executor_spec
from .views import WorkloadKeys, fields_of


class WorkloadError(ValueError):
    pass


@dataclass(frozen=True)
class Workload(WorkloadKeys):
    """A validated workload: every key of SCHEMA an attribute of its typed view
    (harness/workload/views.py: workload.load.concurrency), and the same keys as `values`,
    for what writes the workload whole (the manifest, a sweep point's key)."""

    path: Path
    values: Dict[str, Any]  # every key of SCHEMA, defaults filled in
    notes: Tuple[str, ...] = ()  # valid, but likely not what was meant (warm-up > the run)
    # the trace file as validation read it (every row the run replays), for the run to reuse
    trace_read: Optional[TraceResult] = field(default=None, compare=False, repr=False)

    @property
    def trace_file(self) -> Optional[Path]:
        f = self.trace.file
        return (self.path.parent / f).resolve() if f else None

    @property
    def gil_modes(self) -> Tuple[str, ...]:
        return ("released", "held") if self.gil == "both" else (self.gil,)

    @property
    def arms(self) -> Tuple[str, ...]:
        """The sweep's arms: the GIL modes, and the A/A arm when asked for."""
        return self.gil_modes + (("released_aa",) if self.gil_aa else ()) \
            + (("postprocess_released",) if self.gil_postprocess else ())

    @property
    def switch_intervals(self) -> Tuple[float, ...]:
        v = self.gil_switch_interval_s
        return tuple(v) if isinstance(v, list) else (v,)

    @cached_property
    def disaggregation(self) -> Optional[Disaggregation]:
        """The P/D deployment, or None for a co-located one (built once: a run reads it
        often)."""
        if self.deployment.prefill is None:
            return None
        return disaggregation.from_values(self.values["deployment"], self.device,
                                          self.precision)

    @property
    def ranks(self) -> int:
        """Engine processes of a run on a torch device: its deployment's devices, or its
        P/D instances' (harness/ranks/processes.py); 1 elsewhere (the engine, or a modeled
        P/D deployment's engines, in the harness's process)."""
        if executor_spec(self.device) is not None:
            return 1
        service = self.disaggregation
        return service.devices if service is not None else self.deployment.devices

    def engine_config(self, arm: str, pool: Optional[Pool] = None) -> EngineConfig:
        """The engine of one arm (harness/workload/arms.py: released, held, ...); of one
        instance of `pool` in a P/D deployment."""
        spec = executor_spec(pool.device if pool else self.device)
        # a torch device's deployment: its rank processes' EP (engine/ep.py); the engine
        # parses its sections itself, as mappings
        deployment = pool.deployment if pool else \
            Deployment.from_values(self.values["deployment"], self.precision) \
            if spec is None or spec.profile else None
        engine = pool.engine if pool else self.values["engine"]
        # `auto` left to a torch device: the executor sizes it with the model resident (and
        # checks a given one there)
        auto = engine["num_kv_blocks"] == "auto"
        if auto:
            engine = {**engine, "num_kv_blocks": DEFAULT_KV_BLOCKS}
        return EngineConfig(scheduler=SchedulerConfig(**engine), model=self.model,
                            memory_utilization=pool.deployment.memory_utilization if pool
                            else self.deployment.memory_utilization,
                            size_kv_blocks=auto,
                            deployment=deployment,
                            device="cpu" if spec else self.device,
                            executor=str(spec or "torch"), dtype=self.dtype,
                            precision=self.precision, seed=self.seeds.engine,
                            mtp_acceptance=self.mtp_acceptance,
                            sampling=self.sampling,
                            # a prefill process hands each first token to the decode's
                            keep_tokens=self.tokens or bool(pool and pool.role == "prefill"
                                                            and spec is None),
                            release_gil=ARMS[arm].schedule_released,
                            release_gil_postprocess=ARMS[arm].postprocess_released,
                            launch_us=self.emulated.launch_us)


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
    checks.load_mode(values, fail)
    checks.derived(values, data, spec, path, fail)
    if values["trace"]["generate"] is not None:
        checks.generator(values["trace"]["generate"], fail)
    checks.model(values["model"], fail)
    checks.deployment_fits(values, data, spec, fail)
    checks.tokens(values, spec, fail)
    checks.replay_loop(values, spec, fail)
    checks.output(values, fail)
    commit_variables()  # the manifest records it: a bad one refused before any work
    read = _read_trace(path, values, fail)
    workload = Workload(path=path, values=values, **fields_of(values))
    _engine_configs(workload, fail)
    if read is not None and is_sessions(read.df):
        session_checks.turns_fit(workload, read, fail)
    if workload.disaggregation is not None:
        checks.decode_room(workload.disaggregation.decode, read, values, fail)
    return Workload(path=path, values=values, notes=notes(values, read), trace_read=read,
                    **fields_of(values))


def _read_trace(path: Path, values, fail):
    """The trace file read and checked (its arrivals' span, a session trace's gaps); None
    for a generated trace."""
    trace_file = values["trace"]["file"]
    read = checks.replayed_trace(path.parent / trace_file, values, fail) if trace_file else None
    checks.arrival_span(values["trace"], read, fail)
    if read is not None and is_sessions(read.df):
        session_checks.gaps_span(values, read, fail)
    return read


def _engine_configs(workload: Workload, fail) -> None:
    """Every arm's engine (each pool's, in a P/D deployment) built, as SchedulerConfig
    checks it."""
    service = workload.disaggregation
    for pool in service.pools if service else (None,):
        try:
            for arm in workload.arms:
                workload.engine_config(arm, pool)
        except ValueError as e:  # SchedulerConfig's own checks name the field first
            name = str(e).split()[0]
            key = ("deployment", pool.role, "engine") if pool else ("engine",)
            fail(key[:-1] + ("engine", name) if name in SCHEMA["engine"] else key, str(e))


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
                fail(key, f"expected {e}, got {_show(value)}{_as_text(spec.check, value)}")
        out[name] = value
    return out


def _as_text(check, value) -> str:
    """A hint where YAML read a bool or a number (`on`, `12`) for a key that takes that word
    as text: quote it. Not for null: mostly a value left empty, which no quoting helps."""
    if isinstance(value, bool):
        word, what = ("true" if value else "false"), "true or false"
    elif isinstance(value, (int, float)):
        word, what = str(value), "a number"
    else:
        return ""
    try:
        check(word)
    except ValueError:
        return ""
    return f" (YAML reads it as {what}: quote the text, \"...\")"


def _show(value) -> str:
    """A value as an error message quotes it: `null` for no value, long ones cut short."""
    if value is None:
        return "no value (null)"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _apply_override(data: dict, item: str) -> KeyPath:
    """--set a.b=value (harness/workload/overrides.py) into the workload's mapping; the key path set."""
    try:
        parts, value = parse_set(item)
    except ValueError as e:
        raise WorkloadError(str(e)) from None
    node = data
    schema: object = SCHEMA  # the section's, while it is one (a dict)
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
