"""Test helpers: schedulers built from tiny configs, a small modeled workload, a fresh
interpreter for code that may crash, waits for the telemetry sampler and for a process to
end, a time limit for code that may hang, and a file on a disk that fills up."""

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import psutil

from engine import ReferenceScheduler, Scheduler, SchedulerConfig

FAMILIES = 2  # prompt-prefix families that random requests share

IMPLS = ("cpp", "reference")
REPO = Path(__file__).resolve().parents[1]

# The worked examples' configuration (docs/scheduling.md): KV ample, budget 16.
BASE = dict(max_num_batched_tokens=16, max_num_seqs=256, num_kv_blocks=1024, block_size=16)


def make_scheduler(impl="cpp", **overrides):
    cfg = SchedulerConfig(**{**BASE, **overrides})
    return Scheduler(cfg) if impl == "cpp" else ReferenceScheduler(cfg)


def make_requests(sched, *specs, start_id=0):
    """Add (prompt_len, max_new_tokens) pairs as sequences start_id, start_id + 1, ..."""
    for i, (prompt_len, max_new_tokens) in enumerate(specs):
        sched.add_sequence(seq_id=start_id + i, prompt_len=prompt_len,
                           max_new_tokens=max_new_tokens, arrival_time=float(i))
    return list(range(start_id, start_id + len(specs)))


def rows(plan, rank=0):
    """(seq_id, seqlen_q, seqlen_k) per scheduled row of one rank, in batch order."""
    b = plan.batches[rank]
    return list(zip(b.seq_ids.tolist(), b.seqlen_q.tolist(), b.seqlen_k.tolist()))


def prefix_hash_ids(rng, prompt_len, block_size):
    """Random prefix-cache hash ids, or None: a request joins one of a few families and
    shares that family's chain of block hashes up to a random point, then goes its own way.
    hash_ids[i] identifies the first i + 1 blocks, so a common hash means a common prefix."""
    if rng.random() < 0.4:
        return None
    count = int(rng.integers(0, -(-prompt_len // block_size) + 1))
    family = int(rng.integers(0, FAMILIES))
    common = count if rng.random() < 0.5 else int(rng.integers(0, count + 1))
    return ([family * 1_000_000 + i for i in range(common)]
            + [int(h) for h in rng.integers(2**40, 2**62, count - common)])


def hash_block_size(rng, block_size):
    """Tokens per hash id: mostly the block size, else a multiple of it or (for block sizes
    above 1) a divisor, as a trace's hash block relates to an engine's block."""
    choices = [block_size, block_size, 2 * block_size, 4 * block_size]
    if block_size > 1:
        choices.append(block_size // 2)
    return int(rng.choice(choices))


def in_subprocess(code: str, timeout_s: float = 120.0) -> str:
    """Run `code` in a fresh interpreter at the repository root; its stdout. A native crash
    (a signal) fails the calling test instead of taking pytest down with it."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode < 0:
        raise AssertionError(f"the interpreter died of {signal.Signals(-proc.returncode).name}:\n"
                             f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def wait_for_samples(sampler, rows, source="cpu", timeout_s=30.0):
    """Wait until a started telemetry Sampler has journalled `rows` rows of `source`: the
    child's start-up (a Python interpreter) takes from 0.1 s to seconds on a loaded host."""
    journal = sampler._dir / "journal.jsonl"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count(f'"source": "{source}"') >= rows:
            return
        time.sleep(0.05)
    raise AssertionError(f"the sampler journalled fewer than {rows} {source} rows in {timeout_s} s")


# A small modeled run: a dozen generated requests, no calibration, no telemetry; one DP rank
# over 8 H200s (the weights need at least 8).
MODELED = """trace:
  generate: {requests: 12, rate: 100, prompt: {uniform: [4, 40]}, output: {uniform: [1, 6]}}
engine: {max_num_batched_tokens: 256, num_kv_blocks: 256}
model: deepseek-v3
device: modeled:H200
precision: fp8
deployment: {devices: 8, attention: {tp: 8}, dense: {tp: 8}, stack: roofline}
calibration_requests: 0
telemetry: {enabled: false}
"""


def process_gone(pid, within_s):
    """True once the process has exited (a zombie counts: its parent reaps it) within
    within_s seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def synthetic_run(run_dir, metrics, *, gil_mode="released", values=None, complete=True,
                  trace_sha256="0" * 64, host_cpus=None, modeled=False, host_share=None):
    """A run folder holding what a run's summary says, without running anything: its
    manifest and a summary table of `metrics` ({"ttft.p99": (0.12, "s"), ...});
    `host_share` the manifest's (harness/run/host_share.py), none when None."""
    import json

    import pandas as pd

    from harness.record.table_sink import write_table

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True)
    values = {"name": "synthetic", "engine": {"overlap": False}, **(values or {})}
    manifest = dict(values=values, trace_sha256=trace_sha256, gil_mode=gil_mode, repeat=0,
                    device=dict(backend="cpu", name="x86_64"), modeled=modeled,
                    host_cpus=host_cpus, complete=complete, killed=not complete)
    if host_share is not None:
        manifest["host_share"] = host_share
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    rows = [(*name.split("."), float(v), unit) for name, (v, unit) in metrics.items()]
    write_table(pd.DataFrame(rows, columns=["metric", "stat", "value", "unit"]), run_dir,
                "summary", "parquet", dict(run_id=run_dir.name, gil_mode=gil_mode,
                                           overlap=False))
    return run_dir


def modeled_runs(root, *overrides):
    """Run MODELED into `root` with the given --set overrides; the run folders, in the
    order written (a sweep's arms in its seeded order: released, then held, for gil=both)."""
    return _runs(MODELED, "small", root, overrides)


def _runs(text: str, name: str, root, overrides):
    """`steptrace run` of the workload `text` named `name` into `root`; its run folders,
    in the order written (not a sweep's gil table folder)."""
    from harness.commands import main

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    workload = root / f"{name}.yaml"
    workload.write_text(text + f"output: {root / 'results'}\nname: {name}\n")
    argv = ["run", str(workload)] + [a for o in overrides for a in ("--set", o)]
    assert main(argv) == 0
    runs = (p for p in (root / "results" / name).iterdir() if (p / "manifest.json").is_file())
    return sorted(runs, key=lambda p: p.stat().st_mtime)


@contextmanager
def within(seconds: int):
    """Fail instead of hanging: SIGALRM interrupts a blocking open() or a runaway loop."""
    def stop(*_):
        raise TimeoutError(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


ENOSPC = os.strerror(errno.ENOSPC)  # "No space left on device"


class FullDisk:
    """A file whose device fills up after `room` bytes: the write that overflows writes what
    fits, then fails with ENOSPC, as write(2) does."""

    def __init__(self, file, room):
        self._file, self._room = file, room

    def write(self, data):
        if len(data) > self._room:
            self._file.write(data[:self._room])
            self._room = 0
            raise OSError(errno.ENOSPC, ENOSPC)
        self._room -= len(data)
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


# A P/D deployment of the tiny model on modeled H800s (docs/disaggregation.md): two prefill
# instances and one decode instance of two devices each (DP2, EP2), the KV over a slow link
# (10 MB/s) so that transfers share it and take milliseconds, layer by layer; the decode
# instance holds two sequences a rank, so that some wait for decode room.
PD = """trace:
  generate: {requests: 24, rate: 200, prompt: {uniform: [64, 512]}, output: {uniform: [8, 64]}}
model: tiny
device: modeled:H800
engine: {max_num_batched_tokens: 1024, block_size: 16}
deployment:
  prefill: {instances: 2, devices: 2, attention: {dp: 2}, moe: {ep: 2}}
  decode: {instances: 1, devices: 2, attention: {dp: 2}, moe: {ep: 2},
           engine: {max_num_seqs: 2}}
  kv_transfer: {link: 0.01, latency_us: 20, layerwise: true}
calibration_requests: 0
telemetry: {enabled: false}
"""


def pd_runs(root, *overrides):
    """Run PD into `root` with the given --set overrides (name `pd`); the run folders, in
    the order written."""
    return _runs(PD, "pd", root, overrides)


def with_device_table(run, root):
    """A copy of a modeled run with a device table: a GPU's readings and the host's CPU."""
    import shutil

    import numpy as np
    import pandas as pd

    from harness.record.table_sink import write_table
    from harness.schema import TABLES

    root.mkdir()
    copy = root / run.name
    shutil.copytree(run, copy)
    t = np.arange(20) * 0.1
    device = pd.DataFrame({c: np.full(40, np.nan) for c in TABLES["device"].names})
    device["t_s"], device["source"] = np.r_[t, t], ["nvml"] * 20 + ["cpu"] * 20
    device["device"] = [0] * 20 + [-1] * 20
    device.loc[:19, "util_pct"], device.loc[:19, "power_w"] = 80.0, 600.0
    device.loc[20:, "host_cpu_pct"] = 50.0
    write_table(device, copy, "device", "parquet",
                dict(run_id=copy.name, gil_mode="released", overlap=False))
    return copy
