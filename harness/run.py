"""One workload, end to end: trace -> engine replay -> tables in results/<name>/<run_id>/.

A run directory is new for every run (never overwritten). Ctrl-C or SIGTERM stops the replay
and still writes readable tables of what was recorded, with `complete: false`.
"""

from __future__ import annotations

import hashlib
import platform
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np
import pandas as pd

import engine as engine_pkg
from engine import LLMEngine, load_device_profile

from . import tables
from .metrics import summary
from .recorder import Recorder
from .replay import replay
from .workload_trace import load_workload_trace
from .workload import Workload


def run_workload(workload: Workload, progress: Optional[Callable] = None) -> List[Path]:
    """Every GIL mode x repeat of the workload; returns the run directories written."""
    trace = load_workload_trace(workload)
    out = []
    for gil in workload.gil_modes:
        for repeat in range(workload.values["repeats"]):
            out.append(run_once(workload, trace, gil, repeat, progress))
    return out


def run_once(workload: Workload, trace, gil: str, repeat: int, progress) -> Path:
    run_dir = _new_run_dir(Path(workload.values["output"]) / workload.name, gil, repeat)
    config = workload.engine_config(gil)
    engine = LLMEngine(config)
    recorder = Recorder(workload.values["warmup_steps"])
    manifest = _manifest(workload, trace, engine, gil, repeat)
    tables.write_manifest(manifest, run_dir)
    df = trace.df
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        replay(engine, df["arrival_s"].to_numpy(np.float64), df["prompt_len"].to_numpy(),
               df["output_len"].to_numpy(), workload.clock, recorder, progress)
        manifest["complete"] = True
    except KeyboardInterrupt:
        manifest["interrupted"] = True
    finally:
        signal.signal(signal.SIGTERM, previous)
        manifest["ended"] = _now()
        _write_tables(workload, engine, recorder, df, run_dir, gil, manifest)
    return run_dir


def _write_tables(workload, engine, recorder, df, run_dir, gil, manifest) -> None:
    fmt = workload.values["table_format"]
    labels = dict(run_id=run_dir.name, gil_mode=gil, overlap=engine.config.scheduler.overlap)
    steps = tables.steps_frame(recorder, labels)
    batches = tables.batches_frame(recorder, labels)
    requests, times, offsets = tables.requests_frame(engine, recorder, df, steps, batches)
    # A warm-up request is one first scheduled in a warm-up step.
    first_step = batches.groupby("seq_id")["step"].min().reindex(range(len(df)))
    warm = (first_step < workload.values["warmup_steps"]).to_numpy()
    summary_df = pd.concat([summary(requests, times, offsets, warmup=warm),
                            tables.engine_summary(steps, _peak(engine))], ignore_index=True)
    for name, frame in (("steps", steps), ("batches", batches),
                        ("requests", requests.assign(**labels)),
                        ("summary", summary_df.assign(**labels))):
        tables.write_table(frame, run_dir, name, fmt)
    tables.write_manifest(manifest, run_dir)


def _peak(engine) -> Optional[float]:
    """The device's dense peak at the run's precision, where a profile knows it."""
    executor = engine.config.executor
    if not executor.startswith("modeled:"):
        return None
    try:
        return load_device_profile(executor[len("modeled:"):]).peak(engine.config.precision)
    except ValueError:  # no published peak at this precision: MFU stays out
        return None


def _new_run_dir(base: Path, gil: str, repeat: int) -> Path:
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        run_dir = base / (f"{stamp}-{gil}-r{repeat}" + (f"-{n}" if n else ""))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run directory under {base}")


def _manifest(workload, trace, engine, gil, repeat) -> dict:
    import torch

    return dict(
        workload=str(workload.path.resolve()), workload_sha256=_sha256(workload.path),
        trace=str(workload.trace_file) if workload.trace_file else "generated",
        trace_sha256=trace.sha256,
        trace_rows=len(trace.df), trace_dropped=trace.dropped, values=workload.values,
        gil_mode=gil, repeat=repeat, switch_interval_s=sys.getswitchinterval(),
        git_sha=_git_sha(), versions=dict(python=platform.python_version(),
                                          steptrace=engine_pkg.__version__,
                                          torch=torch.__version__, numpy=np.__version__),
        host_cpu=_cpu_name(), device=dict(backend=engine.device.backend, name=engine.device.name,
                                          chip=engine.device.chip,
                                          capability=engine.device.capability),
        executor=engine.config.executor, modeled=engine.config.executor.startswith("modeled:"),
        started=_now(), complete=False)


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _git_sha() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
