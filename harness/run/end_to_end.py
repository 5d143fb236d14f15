"""One run of a workload, end to end: its engine, calibration, replay and telemetry, and
its tables in <output>/<name>/<run_id>/ (harness/sweeps/sweep.py runs every run a workload
plans). It returns what it wrote (Written).

A run directory is new for every run (never overwritten). Ctrl-C or SIGTERM stops the replay
and still writes readable tables of what was recorded, with `complete: false`
(harness/io/interrupt.py).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np
import pandas as pd

from engine import LLMEngine
from engine.devices.profile import profile_record

from ..io.interrupt import Stop, install, restore
from ..ranks.pd_replay import PDFeeder
from ..ranks.processes import Ranks, local_devices
from ..ranks.recorder import RanksRecorder
from ..ranks.replay import Colocated, Feeder, replay_ranks
from ..record import run_folder, vllm_result
from ..record.metrics import SUMMARY_COLUMNS
from ..record.pd_summary import pd_rows
from ..record.recorder import Recorder
from ..record.table_sink import write_table
from ..record.table_writer import NotStarted
from ..replay.disaggregated import Instance, replay_disaggregated
from ..replay.driver import Requests, replay
from ..replay.frontend import Frontend
from ..replay.native import replay_disaggregated_native, replay_native
from ..telemetry import Sampler, device_frame, device_summary
from ..workload import Workload
from .calibration import calibrate, planned as planned_calibration
from .host_share import HostShare
from .manifest import manifest as start_manifest, now
from .planned_run import PlannedRun
from .tokens import tokens_frame

PD_UNCALIBRATED = "off: a P/D deployment's harness cost is not calibrated"
RANKS_UNCALIBRATED = "off: the harness's cost over rank processes is not calibrated"
CHUNK_STEPS = 1024  # a rank's steps per chunk of columns sent to the harness


class Written(NamedTuple):
    """What a run wrote: its folder, its manifest as last written, its summary rows."""

    run_dir: Path
    manifest: dict
    summary: pd.DataFrame


def run_once(workload: Workload, trace, run: PlannedRun, progress,
             stop: Optional[Stop] = None, into: Optional[Path] = None) -> Optional[Written]:
    """One run; None, with nothing written, if `stop` was set during the calibration.
    Whole on its own: its signal handlers (over the sweep's, when in one) set `stop`."""
    stop = Stop() if stop is None else stop
    service = workload.disaggregation
    if service is not None and workload.ranks == 1:  # modeled: one engine per instance
        engines = [(pool.role, k, LLMEngine(workload.engine_config(run.arm, pool)))
                   for pool in service.pools for k in range(pool.instances)]
        return _Run(workload, trace, run, engines, dict(off=PD_UNCALIBRATED), stop,
                    into).replay(progress)
    if workload.ranks > 1:  # an engine process per device; the harness's cost not calibrated
        ranks, engines = _rank_processes(workload, run.arm)
        return _Run(workload, trace, run, engines, dict(off=RANKS_UNCALIBRATED), stop, into,
                    ranks).replay(progress)
    # the engine first: on a real accelerator it sizes the KV pool the calibration also uses
    engine = LLMEngine(workload.engine_config(run.arm))
    requests, off = planned_calibration(workload.values, len(trace.df))
    calibration = calibrate(engine.config, trace.df, requests) if requests else dict(off=off)
    if stop.is_set():
        engine.close()
        return None
    return _Run(workload, trace, run, [("colocated", 0, engine)], calibration, stop,
                into).replay(progress)


def _rank_processes(workload, arm: str):
    """The engine processes of a run on a torch device, and its instances (role, index,
    engine) as the recorder and manifest take them: one co-located instance over every
    rank, or a P/D deployment's instances, each over its devices' ranks."""
    service = workload.disaggregation
    instances = [(pool.role, k, pool.deployment.devices, workload.engine_config(arm, pool))
                 for pool in service.pools for k in range(pool.instances)] \
        if service is not None else \
        [("colocated", 0, workload.ranks, workload.engine_config(arm))]
    firsts = np.cumsum([0] + [n for _, _, n, _ in instances])
    ranks = Ranks([c for _, _, n, c in instances for _ in range(n)],
                  [role for role, _, n, _ in instances for _ in range(n)],
                  [range(a, b) for a, b in zip(firsts[:-1], firsts[1:])],
                  workload.values, CHUNK_STEPS)
    return ranks, [(role, k, ranks.engines[a])
                   for (role, k, _, _), a in zip(instances, firsts[:-1])]


class _Run:
    """A run from its folder's making to its last manifest."""

    def __init__(self, workload, trace, run: PlannedRun, engines, calibration, stop: Stop,
                 into: Optional[Path], ranks: Optional[Ranks] = None) -> None:
        """`engines`: (role, index, engine) of each instance; one `colocated` one, or a P/D
        deployment's. `calibration`: the calibration's figures, or why it is `off`.
        `ranks`: the engine's processes, one per device (its engine then theirs)."""
        self.workload, self.trace, self.stop, self.ranks = workload, trace, stop, ranks
        self.engines = engines
        self.engine = engine = engines[0][2]  # the manifest's, the sampler's
        self.calibration = calibration
        v = workload.values
        self.manifest = start_manifest(workload, trace, engine, run.arm, run.block)
        if workload.disaggregation is not None:
            self.manifest["pools"] = _pools(workload.disaggregation, engines)
        if ranks is not None:
            self.manifest["ranks"] = [
                dict(rank=r, pid=ranks.pids[r], role=role, instance=k, dp_rank=g.index(r))
                for (role, k, _), g in zip(engines, ranks.groups) for r in g]
        self.manifest.update(block=run.block, order=run.order, calibration=calibration)
        interval = f"-si{run.switch_interval_s:g}" if len(workload.switch_intervals) > 1 else ""
        self.run_dir = run_folder.new_run_dir(into or Path(v["output"]) / workload.name,
                                              f"{run.arm}-r{run.block}{interval}")
        self.fmt = v["table_format"]
        self.labels = dict(run_id=self.run_dir.name, gil_mode=run.arm,
                           overlap=engine.config.scheduler.overlap)
        arrivals = trace.df["arrival_s"].to_numpy(np.float64)
        self.frontend = Frontend(arrivals, v["frontend"]["per_token_us"], v["warmup_steps"],
                                 stop) if v["frontend"]["mode"] == "thread" else None
        slo = {name: limit for name, limit in v["slo"].items() if limit is not None}
        recorded = [(role, k) for role, k, _ in engines] if workload.disaggregation else engine
        try:
            self.recorder = (Recorder if ranks is None else RanksRecorder)(
                recorded, v["warmup_steps"], self.run_dir, self.fmt,
                                     self.labels, trace=trace.df, frontend=self.frontend,
                                     slo=slo)
            if workload.clock == "real":  # its start-up would take the CPU from the first steps
                self.recorder.tables_ready()
        except BaseException:  # nothing began: no run directory is left behind
            self._close_engines()
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise
        run_folder.write_manifest(self.manifest, self.run_dir)

    def replay(self, progress) -> Written:
        previous = install(self.stop)
        self.sampler = self.share = None
        failure = None
        try:
            start = time.perf_counter()  # the real clock's zero, shared with the sampler
            self.share = HostShare(self.workload.values["gil_contamination_pct"])
            self.sampler = _sampler(self.workload, self.engine, start)
            self.manifest["complete"] = self._replay(progress, start)
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
        return Written(self.run_dir, self.manifest, summary)

    def _replay(self, progress, start: float) -> bool:
        load = self.workload.values["load"]
        requests = Requests.of(self.trace.df, self.trace.hash_block_size, load["concurrency"])
        service = self.workload.disaggregation
        if self.ranks is not None:
            recorder = self.recorder
            assert isinstance(recorder, RanksRecorder), "rank processes' chunks"
            feeder: Feeder = Colocated(self.ranks, requests)
            if service is not None:
                assert recorder.join is not None, "a P/D deployment's recorder joins"
                feeder = PDFeeder(service, self.ranks, requests, recorder.join.transfers)
            return replay_ranks(self.ranks, feeder, requests, recorder, progress, start,
                                self.stop)
        if service is not None:
            recorder = self.recorder
            instances = [Instance(role, k, engine, log)
                         for (role, k, engine), log in zip(self.engines, recorder.logs)]
            arrived = recorder.arrived if load["concurrency"] else lambda i, t: None
            if self.workload.values["replay_loop"] == "cpp":
                return replay_disaggregated_native(service, instances, requests,
                                                   self.engine.model_config, recorder,
                                                   progress, self.stop)
            return replay_disaggregated(service, instances, requests, self.engine.model_config,
                                        arrived, progress, self.stop)
        if self.workload.values["replay_loop"] == "cpp":
            return replay_native(self.engine, requests, self.recorder, progress, self.stop)
        return replay(self.engine, requests,
                      self.workload.clock, self.recorder, progress, start, self.stop,
                      frontend=self.frontend)

    def _close_engines(self) -> None:
        for _, _, engine in self.engines:
            engine.close()
        if self.ranks is not None:
            self.ranks.close()

    def _finish(self, failure: Optional[BaseException]) -> pd.DataFrame:
        """Telemetry stopped, the tables, the summary and its result.json written, the
        manifest last."""
        self.manifest["ended"] = now()
        if self.share is not None:
            self.manifest["host_share"] = self.share.stop()
        device, self.manifest["telemetry"] = self.sampler.stop() if self.sampler else \
            (device_frame([]), {"sampler": "telemetry.enabled: false"})
        if self.frontend is not None:  # every committed token delivered, unless stopped
            self.frontend.close()
        self._close_engines()
        removed = False
        try:
            self.recorder.close()
            write_table(device, self.run_dir, "device", self.fmt, self.labels)
            if self.workload.values["tokens"]:
                write_table(tokens_frame(self._output_tokens(),
                                         self.trace.df["max_new_tokens"].to_numpy()),
                            self.run_dir, "tokens", self.fmt, self.labels)
            summary = self._summary(device)
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

    def _output_tokens(self):
        """Output token ids by request, of every engine (of every rank process)."""
        if self.ranks is not None:  # a P/D request's: its prefill's first, then its decode's
            outputs: dict = {}
            for _, tokens in (self.ranks.done[r] for r in sorted(self.ranks.done)):
                for i, t in tokens.items():
                    outputs.setdefault(i, []).extend(t)
            return outputs
        return {i: t for _, _, engine in self.engines
                for i, t in engine.output_tokens().items()}

    def _summary(self, device: pd.DataFrame) -> pd.DataFrame:
        """The summary table, from what the recorder (and the frontend, if any) kept."""
        recorder, engine, calibration = self.recorder, self.engine, self.calibration
        latency = recorder.latency.rows(*recorder.itl())
        harness = pd.DataFrame([("harness", stat, calibration[f"{stat}_us"], "us")
                                for stat in ("per_step", "per_request")]
                               if "off" not in calibration else [],
                               columns=list(SUMMARY_COLUMNS))
        frontend = self.frontend.summary(~recorder.warm) if self.frontend else None
        service = self.workload.disaggregation
        steps = recorder.step_summary.rows(engine.peak_tflops, _chips_per_rank(engine)) \
            if service is None else \
            pd_rows(recorder, service, {role: e for role, _, e in self.engines}, latency)
        telemetry = device_summary(device, *_wall_window(self.workload, recorder),
                                   recorder.latency.output_tokens)
        return pd.concat([latency, frontend, steps, harness, telemetry], ignore_index=True)


def _sampler(workload, engine, start: float) -> Optional[Sampler]:
    """The run's telemetry process (host CPU always; the engine's device where it has one,
    every rank's over rank processes)."""
    settings = workload.values["telemetry"]
    if not settings["enabled"]:
        return None
    device = engine.device
    indices = [] if device.backend == "cpu" else [device.torch_device.index or 0] \
        if workload.ranks == 1 else local_devices(device.backend, workload.ranks)
    sampler = Sampler(device.backend, indices, settings["interval_s"], start, os.getpid())
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
    step times are not wall times: its whole run is the window."""
    window = recorder.step_summary.window()
    return (0.0, np.inf) if workload.clock == "virtual" or window is None else window
