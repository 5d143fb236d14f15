"""One workload, end to end: trace -> engine replay -> tables in results/<name>/<run_id>/.

A run directory is new for every run (never overwritten). Ctrl-C or SIGTERM stops the replay
and still writes readable tables of what was recorded, with `complete: false`; in a sweep it
stops the sweep: no later run starts (harness/interrupt.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np
import pandas as pd

import engine as engine_pkg
from engine import LLMEngine
from engine.devices.profile import profile_record
from engine.executors import ExecutorSpec

from . import tables
from .calibration import calibrate
from .commands import show
from .frontend import Frontend
from .gil_protocol import PlannedRun, table as gil_table
from .host_share import HostShare
from .interrupt import Stop, install, restore, signals_stop
from .metrics import SUMMARY_COLUMNS
from .recorder import Recorder
from .replay import replay
from .table_sink import write_table
from .telemetry import Sampler, device_frame, device_summary
from .workload import Workload, WorkloadError
from .workload_trace import load_workload_trace


def run_workload(workload: Workload, progress: Optional[Callable] = None,
                 stop: Optional[Stop] = None, into: Optional[Path] = None) -> List[Path]:
    """Every run of the workload's sweep, interleaved (harness/gil_protocol.py), each at its
    switch interval; returns the run directories written, in `into` (default <output>/<name>/;
    a capacity search keeps its probes together). A sweep of more than one run writes its
    `gil` table under <output>/<name>/sweeps/<first run id>/ unless it was stopped. The
    first SIGINT or SIGTERM (or a KeyboardInterrupt from `progress`) stops the sweep: the
    run in progress is written, marked incomplete, no later run starts, and `stop.signum`
    says which signal it was."""
    trace = load_workload_trace(workload)
    stop = Stop() if stop is None else stop
    out = []
    planned = workload.plan()
    rows = []
    with signals_stop(stop):
        for run in planned:
            if stop.is_set():  # the sweep was stopped: no later run starts
                break
            previous = sys.getswitchinterval()
            sys.setswitchinterval(run.switch_interval_s)
            try:
                run_dir = run_once(workload, trace, run, progress, stop, into)
            finally:
                sys.setswitchinterval(previous)
            if run_dir is not None:  # None: stopped during its calibration
                out.append(run_dir)
                share = json.loads((run_dir / "manifest.json").read_text()).get("host_share")
                rows.append((run_dir.name, run, share or NO_SHARE, show.read(run_dir)["summary"]))
    if len(planned) > 1 and rows and not stop.is_set():  # a stopped sweep's blocks are partial
        sweep = Path(workload.values["output"]) / workload.name / "sweeps" / out[0].name
        sweep.mkdir(parents=True, exist_ok=True)
        write_table(gil_table(rows), sweep, "gil", workload.values["table_format"])
    return out


NO_SHARE = dict(other_cpu_pct=np.nan, steal_pct=np.nan, contaminated=False)  # not measured


def run_once(workload: Workload, trace, run: PlannedRun, progress,
             stop: Optional[Stop] = None, into: Optional[Path] = None) -> Optional[Path]:
    """One run; None, with nothing written, if `stop` was set during the calibration.
    Whole on its own: its signal handlers (over the sweep's, when in one) set `stop`."""
    stop = Stop() if stop is None else stop
    gil, repeat = run.arm, run.block
    # the engine first: on a real accelerator it sizes the KV pool the calibration also uses
    engine = LLMEngine(workload.engine_config(run.arm))
    calibration_requests = min(workload.values["calibration_requests"], len(trace.df))
    calibration = calibrate(engine.config, trace.df, calibration_requests) \
        if calibration_requests else None
    if stop.is_set():
        engine.close()
        return None
    config = engine.config
    manifest = _manifest(workload, trace, engine, gil, repeat)
    manifest.update(block=run.block, order=run.order)
    interval = f"-si{run.switch_interval_s:g}" if len(workload.switch_intervals) > 1 else ""
    run_dir = new_stamped_dir(into or Path(workload.values["output"]) / workload.name,
                           f"{gil}-r{repeat}{interval}")
    if calibration:
        manifest["calibration"] = calibration
    fmt = workload.values["table_format"]
    labels = dict(run_id=run_dir.name, gil_mode=gil, overlap=config.scheduler.overlap)
    df = trace.df
    frontend = Frontend(df["arrival_s"].to_numpy(np.float64),
                        workload.values["frontend"]["per_token_us"],
                        workload.values["warmup_steps"], stop) \
        if workload.values["frontend"]["mode"] == "thread" else None
    # the recorder's table writer is ready when it returns: the manifest says the run began
    slo = {name: limit for name, limit in workload.values["slo"].items() if limit is not None}
    try:
        recorder = Recorder(engine, workload.values["warmup_steps"], run_dir, fmt, labels,
                            trace=df, frontend=frontend, slo=slo)
    except BaseException:  # nothing began: no run directory is left behind
        engine.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    tables.write_manifest(manifest, run_dir)
    previous = install(stop)
    sampler = share = failure = None
    try:
        start = time.perf_counter()  # the real clock's zero, shared with the sampler
        share = HostShare(workload.values["gil_contamination_pct"])
        sampler = _sampler(workload, engine, start)
        manifest["complete"] = replay(
            engine, df["arrival_s"].to_numpy(np.float64), df["prompt_len"].to_numpy(),
            df["max_new_tokens"].to_numpy(), workload.clock, recorder, progress, start, stop,
            hash_ids=df["hash_ids"].to_numpy(object) if "hash_ids" in df else None,
            hash_block_size=trace.hash_block_size, frontend=frontend)
        manifest["interrupted"] = not manifest["complete"]
    except KeyboardInterrupt:  # from a progress callback, between steps
        manifest["interrupted"] = True
        stop.request()
    except Exception as e:  # the run failed: said in its manifest, not taken for a signal
        failure = e
        manifest.update(complete=False, interrupted=False, error=f"{type(e).__name__}: {e}")
        raise
    finally:  # a signal now only sets `stop`: the tables are written whole
        try:
            manifest["ended"] = _now()
            if share is not None:
                manifest["host_share"] = share.stop()
            device, manifest["telemetry"] = sampler.stop() if sampler else \
                (device_frame([]), {"sampler": "telemetry.enabled: false"})
            if frontend is not None:  # every committed token delivered, unless stopped
                frontend.close()
            engine.close()
            try:
                recorder.close()
                write_table(device, run_dir, "device", fmt, labels)
                _write_summary(workload, engine, recorder, device, run_dir, fmt, labels,
                               calibration, frontend)
            except Exception as e:  # a table could not be written: the run failed
                # a table that cannot be written is why the hand-off's pipe broke
                if failure is None or isinstance(failure, BrokenPipeError):
                    manifest.update(error=f"{type(e).__name__}: {e}")
                manifest.update(complete=False, interrupted=False)
                raise
            finally:
                tables.write_manifest(manifest, run_dir)
        finally:
            restore(previous)
    return run_dir


def _sampler(workload, engine, start: float) -> Optional[Sampler]:
    """The run's telemetry process (host CPU always; the engine's device where it has one)."""
    settings = workload.values["telemetry"]
    if not settings["enabled"]:
        return None
    device = engine.device
    indices = [] if device.backend == "cpu" else [device.torch_device.index or 0]
    sampler = Sampler(device.backend, indices, settings["interval_s"], start, os.getpid())
    sampler.start()
    return sampler


def _chips_per_rank(engine) -> int:
    """A DP rank's chips: its deployment's attention group, else its context-parallel ones."""
    deployment = engine.config.deployment
    return deployment.devices // deployment.attention_dp if deployment \
        else engine.config.scheduler.cp_size


def _write_summary(workload, engine, recorder, device, run_dir, fmt, labels,
                   calibration, frontend) -> None:
    """The summary table, from what the recorder (and the frontend, if any) kept."""
    latency = recorder.latency.rows(*recorder.itl())
    harness = pd.DataFrame([("harness", stat, calibration[f"{stat}_us"], "us")
                            for stat in ("per_step", "per_request")] if calibration else [],
                           columns=list(SUMMARY_COLUMNS))
    frontend_rows = frontend.summary(~recorder.warm) if frontend else None
    summary_df = pd.concat([latency, frontend_rows,
                            recorder.step_summary.rows(engine.peak_tflops,
                                                       _chips_per_rank(engine)), harness,
                            device_summary(device, *_wall_window(workload, recorder),
                                           recorder.latency.output_tokens)],
                           ignore_index=True)
    write_table(summary_df, run_dir, "summary", fmt, labels)


def _wall_window(workload, recorder):
    """The measured steps' span on the wall clock the sampler stamps. A virtual clock's
    step times are not wall times: its whole run is the window."""
    window = recorder.step_summary.window()
    return (0.0, np.inf) if workload.clock == "virtual" or window is None else window


def new_stamped_dir(base: Path, arm: str) -> Path:
    """A new folder base/<date-time>-<arm>, never one that existed (a run's, a search's).
    A symbolic link as base is refused: a run writes only where its workload says."""
    if base.is_symlink():
        raise WorkloadError(f"{base} is a symbolic link (to {os.readlink(base)}): a run "
                            f"writes its folder only where output and name say; remove the "
                            f"link or set output to where it points")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # an output the workload names that cannot hold folders
        raise WorkloadError(f"cannot make the run folder {base}: {e.strerror}") from None
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        run_dir = base / (f"{stamp}-{arm}" + (f"-{n}" if n else ""))
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run directory under {base}")


def _manifest(workload, trace, engine, gil, repeat) -> dict:
    import torch

    modeled = ExecutorSpec.parse(engine.config.executor).modeled
    return dict(
        workload=str(workload.path.resolve()), workload_sha256=_sha256(workload.path),
        trace=str(workload.trace_file) if workload.trace_file else "generated",
        trace_sha256=trace.sha256,
        trace_rows=len(trace.df), trace_dropped=trace.dropped, values=workload.values,
        gil_mode=gil, repeat=repeat, switch_interval_s=sys.getswitchinterval(),
        git_sha=_git_sha(), versions=dict(python=platform.python_version(),
                                          steptrace=engine_pkg.__version__,
                                          torch=torch.__version__, numpy=np.__version__),
        host_cpu=_cpu_name(), host_cpus=os.cpu_count(),
        device=dict(backend=engine.device.backend, name=engine.device.name,
                    chip=engine.device.chip, capability=engine.device.capability),
        executor=engine.config.executor, modeled=modeled,
        modeled_device=engine.device_profile.name if modeled else None,
        device_profile=profile_record(engine.device_profile) if engine.device_profile else None,
        kv_pool=engine.kv_pool.manifest() if engine.kv_pool else None,
        started=_now(), complete=False, pid=os.getpid(), host=socket.gethostname())


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
