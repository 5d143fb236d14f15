"""One run of a workload, end to end: its loop (loops.py builds it, with its engines),
calibration, replay and telemetry, and its tables in <output>/<name>/<run_id>/
(harness/sweeps/sweep.py runs every run a workload plans). It returns the run it wrote
(a Run: harness/record/run.py).

A run directory is new for every run (never overwritten). Ctrl-C or SIGTERM stops the replay
and still writes readable tables of what was recorded, with `complete: false`
(harness/io/interrupt.py).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from engine.devices.profile import profile_record

from ..io.interrupt import Stop, install, restore
from ..ranks.processes import local_devices
from ..record import run_folder, vllm_result
from ..record.metrics import SUMMARY_COLUMNS
from ..record.pd_summary import pd_rows
from ..record.run import Run
from ..record.session_summary import REQUEST_COLUMNS as SUMMARY_REQUEST_COLUMNS, session_summary
from ..record.sessions_table import REQUEST_COLUMNS as SESSION_REQUEST_COLUMNS, session_rows
from ..record.table_reader import read_requests, table_path
from ..record.table_sink import write_table
from ..record.table_writer import NotStarted
from ..replay.driver import Requests
from ..replay.loop import Loop
from ..telemetry import Sampler, device_frame, device_summary
from ..traces.sessions import is_sessions
from ..workload import Workload
from .calibration import calibrate, planned as planned_calibration
from .host_share import HostShare
from .loops import build_loop
from .manifest import manifest as start_manifest, now
from .planned_run import PlannedRun
from .tokens import tokens_frame


def run_once(workload: Workload, trace, run: PlannedRun, progress,
             stop: Optional[Stop] = None, into: Optional[Path] = None) -> Optional[Run]:
    """One run; None, with nothing written, if `stop` was set while its engines started or
    during the calibration. Whole on its own: its signal handlers (over the sweep's, when
    in one) set `stop`. Its engines (and processes) are closed however it ends."""
    stop = Stop() if stop is None else stop
    # the engines first: on a real accelerator one sizes the KV pool the calibration uses
    loop = build_loop(workload, run.arm, trace, stop)
    try:
        calibration: dict = dict(off=loop.uncalibrated)
        if loop.uncalibrated is None:
            requests, off = planned_calibration(workload, len(trace.df))
            calibration = calibrate(loop.instances[0][2].config, trace.df, requests) \
                if requests else dict(off=off)
    except BaseException:
        loop.close()
        raise
    if stop.is_set():
        loop.close()
        return None
    return _Running(workload, trace, run, loop, calibration, stop, into).replay(progress)


def run_loop(workload: Workload, trace, run: PlannedRun, loop: Loop, calibration: dict,
             stop: Stop) -> Run:
    """One run of a loop built already (a served run's: harness/serve/), uncalibrated
    where `calibration` says why."""
    return _Running(workload, trace, run, loop, calibration, stop, None).replay(None)


class _Running:
    """A run from its folder's making to its last manifest."""

    def __init__(self, workload, trace, run: PlannedRun, loop: Loop, calibration, stop: Stop,
                 into: Optional[Path]) -> None:
        """`calibration`: the calibration's figures, or why it is `off`. Should it fail, the
        loop is closed and no run directory is left behind."""
        self.workload, self.trace, self.stop, self.loop = workload, trace, stop, loop
        # the manifest's, the sampler's; None against an endpoint (no engine here)
        self.engine = engine = loop.instances[0][2] if loop.instances else None
        self.calibration = calibration
        run_dir: Optional[Path] = None
        try:
            self.manifest = start_manifest(workload, trace, engine, run.arm, run.block)
            if workload.disaggregation is not None:
                self.manifest["pools"] = _pools(workload.disaggregation, loop.instances)
            self.manifest.update(loop.manifest())
            self.manifest.update(block=run.block, order=run.order, calibration=calibration)
            interval = f"-si{run.switch_interval_s:g}" \
                if len(workload.switch_intervals) > 1 else ""
            self.run_dir = run_dir = run_folder.new_run_dir(
                into or Path(workload.output) / workload.name,
                f"{run.arm}-r{run.block}{interval}")
            self.fmt = workload.table_format
            self.labels = dict(run_id=self.run_dir.name, gil_mode=run.arm,
                               overlap=engine.config.scheduler.overlap if engine
                               else workload.engine.overlap)
            slo = {name: limit for name, limit in asdict(workload.slo).items()
                   if limit is not None}
            recorded = [(role, k) for role, k, _ in loop.instances] \
                if workload.disaggregation else engine
            self.recorder = loop.recorder_type(recorded, workload.warmup_steps, self.run_dir,
                                               self.fmt, self.labels, trace=trace.df,
                                               frontend=loop.frontend, slo=slo)
            if workload.clock == "real":  # its start-up would take the CPU from the first steps
                self.recorder.tables_ready()
        except BaseException:
            loop.close()
            if run_dir is not None:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        run_folder.write_manifest(self.manifest, self.run_dir)

    def replay(self, progress) -> Run:
        previous = install(self.stop)
        self.sampler = self.share = None
        failure = None
        try:
            start = time.perf_counter()  # the real clock's zero, shared with the sampler
            self.share = HostShare(self.workload.gil_contamination_pct)
            self.sampler = _sampler(self.workload, self.engine, start)
            requests = Requests.of(self.trace.df, self.trace.hash_block_size,
                                   self.workload.load.concurrency, self.workload.load.sessions)
            self.manifest["complete"] = self.loop.run(requests, self.recorder, progress,
                                                      self.stop, start)
            self.manifest["interrupted"] = not self.manifest["complete"]
        except KeyboardInterrupt:  # from a progress callback, between steps
            self.manifest["interrupted"] = True
            self.stop.request()
        except Exception as e:  # the run failed: said in its manifest, not taken for a signal
            failure = e
            self.manifest.update(complete=False, interrupted=False,
                                 error=f"{type(e).__name__}: {e}")
            raise
        finally:  # a signal now only sets `stop`: the tables are written whole
            try:
                summary = self._finish(failure)
            finally:
                restore(previous)
        return Run.written(self.run_dir, self.manifest, summary)

    def _finish(self, failure: Optional[BaseException]) -> pd.DataFrame:
        """Telemetry stopped, the tables, the summary and its result.json written, the
        manifest last."""
        self.manifest["ended"] = now()
        if self.share is not None:
            self.manifest["host_share"] = self.share.stop()
        device, self.manifest["telemetry"] = self.sampler.stop() if self.sampler else \
            (device_frame([]), {"sampler": "telemetry.enabled: false"})
        self.loop.close()
        removed = False
        try:
            self.recorder.close()
            write_table(device, self.run_dir, "device", self.fmt, self.labels)
            sessions = None  # a session trace's summary rows
            if is_sessions(self.trace.df):
                trace = self.trace.df
                requests = read_requests(table_path(self.run_dir, "requests"), (
                    *SESSION_REQUEST_COLUMNS, *SUMMARY_REQUEST_COLUMNS))
                table = session_rows(requests, trace)
                write_table(table, self.run_dir, "sessions", self.fmt, self.labels)
                sessions = session_summary(requests, table,
                                           trace["parent_row"].to_numpy() < 0,
                                           ~self.recorder.warm)
            if self.workload.tokens:
                write_table(tokens_frame(self.loop.output_tokens(),
                                         self.recorder.max_new_tokens),
                            self.run_dir, "tokens", self.fmt, self.labels)
            summary = self._summary(device, sessions)
            write_table(summary, self.run_dir, "summary", self.fmt, self.labels)
            vllm_result.write(self.run_dir, summary.to_dict("records"), self.manifest)
            return summary
        except NotStarted:  # no table was begun (a virtual-clock run does not wait for the
            removed = True  # writer): no folder is left
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        except Exception as e:  # a table could not be written: the run failed
            # a table that cannot be written is why the hand-off's pipe broke
            if failure is None or isinstance(failure, BrokenPipeError):
                self.manifest.update(error=f"{type(e).__name__}: {e}")
            self.manifest.update(complete=False, interrupted=False)
            raise
        finally:
            if not removed:
                run_folder.write_manifest(self.manifest, self.run_dir)

    def _summary(self, device: pd.DataFrame, sessions: Optional[pd.DataFrame]) -> pd.DataFrame:
        """The summary table, from what the recorder (and the frontend, if any) kept, and a
        session trace's `sessions` rows."""
        recorder, engine, calibration = self.recorder, self.engine, self.calibration
        latency = recorder.latency.rows(*recorder.itl())
        harness = pd.DataFrame([("harness", stat, calibration[f"{stat}_us"], "us")
                                for stat in ("per_step", "per_request")]
                               if "off" not in calibration else [],
                               columns=list(SUMMARY_COLUMNS))
        frontend = self.loop.frontend
        frontend = frontend.summary(~recorder.warm) if frontend is not None else None
        service = self.workload.disaggregation
        steps = None if engine is None else \
            recorder.step_summary.rows(engine.peak_tflops, _chips_per_rank(engine)) \
            if service is None else \
            pd_rows(recorder, service, {role: e for role, _, e in self.loop.instances}, latency)
        telemetry = device_summary(device, *_wall_window(self.workload, recorder),
                                   recorder.latency.output_tokens)
        return pd.concat([latency, sessions, frontend, steps, harness, telemetry],
                         ignore_index=True)


def _sampler(workload, engine, start: float) -> Optional[Sampler]:
    """The run's telemetry process (host CPU always; the engine's device where it has one,
    every rank's over rank processes)."""
    settings = workload.telemetry
    if not settings.enabled:
        return None
    if engine is None:  # against an endpoint: the host alone
        sampler = Sampler("cpu", [], settings.interval_s, start, os.getpid())
        sampler.start()
        return sampler
    device = engine.device
    indices = [] if device.backend == "cpu" else [device.torch_device.index or 0] \
        if workload.ranks == 1 else local_devices(device.backend, workload.ranks)
    sampler = Sampler(device.backend, indices, settings.interval_s, start, os.getpid())
    sampler.start()
    return sampler


def _pools(service, engines) -> dict:
    """A P/D deployment's pools as the manifest records them: each pool's instances,
    devices and the profile its steps were modeled on (none on a real device)."""
    first = {role: engine for role, _, engine in reversed(engines)}
    pools = {}
    for pool in service.pools:
        engine = first[pool.role]
        pools[pool.role] = dict(instances=pool.instances, devices=pool.deployment.devices,
                                num_kv_blocks=engine.config.scheduler.num_kv_blocks)
        if engine.device_profile is not None:
            executor = getattr(engine, "executor", None)  # a process's ranks: none here
            pools[pool.role].update(modeled_device=engine.device_profile.name,
                                    device_profile=profile_record(engine.device_profile),
                                    step_model=getattr(executor, "step_model", None))
    return pools


def _chips_per_rank(engine) -> int:
    """A DP rank's chips: its deployment's attention group, else its context-parallel ones."""
    deployment = engine.config.deployment
    return deployment.devices // deployment.attention_dp if deployment \
        else engine.config.scheduler.cp_size


def _wall_window(workload, recorder):
    """The measured steps' span on the wall clock the sampler stamps. A virtual clock's
    step times are not wall times: its whole run is the window (a run against an endpoint,
    which has no steps: its whole run too)."""
    if workload.target is not None:
        return (0.0, np.inf)
    window = recorder.step_summary.window()
    return (0.0, np.inf) if workload.clock == "virtual" or window is None else window
