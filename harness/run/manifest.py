"""A run's manifest as it starts (its keys declared in harness/schema/manifest.py): what
ran (the workload, its trace, the engine, the device and its profile), where (host,
versions, git commit) and who writes it (pid, host: `show` tells a killed run from a
running one by them).

The git commit (`git_sha`, `git_date`) is the engine's under test: $STEPTRACE_COMMIT and
$STEPTRACE_COMMIT_DATE where CI sets them, else the checkout steptrace runs from, only where
git tracks this package's files there (an installed steptrace inside another repository's
folder would otherwise record that repository's HEAD); else none. A run against an
endpoint records the variables' only: its engine is the endpoint's, not the checkout's. `versions.steptrace` is
always the package's own version."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

import engine as engine_pkg
from engine.devices.profile import profile_record
from engine.executors import ExecutorSpec

from ..io.one_word import commit_variables


def manifest(workload, trace, engine, gil: str, repeat: int) -> dict:
    """`engine` None: a run against an endpoint (the workload's `target`), whose device is
    the endpoint's model, its executor `endpoint`."""
    if engine is None:  # the engine under test is the endpoint's, not this checkout
        sha, date = commit_variables()
        return {**_common(workload, trace, gil, repeat), **_endpoint(workload.target),
                "git_sha": sha, "git_date": date}
    spec = ExecutorSpec.parse(engine.config.executor)
    modeled = spec.modeled
    return dict(
        **_common(workload, trace, gil, repeat),
        device=dict(backend=engine.device.backend, name=engine.device.name,
                    chip=engine.device.chip, capability=engine.device.capability),
        executor=engine.config.executor, executor_kind=spec.kind, profile=spec.profile,
        modeled=modeled,
        modeled_device=engine.device_profile.name if modeled else None,
        device_profile=profile_record(engine.device_profile) if engine.device_profile else None,
        step_model=getattr(getattr(engine, "executor", None), "step_model", None),
        kv_pool=engine.kv_pool.manifest() if engine.kv_pool else None, **_started())


def _endpoint(target) -> dict:
    return dict(device=dict(backend="endpoint", name=f"{target.model} at {target.endpoint}",
                            chip=None, capability=None),
                executor="endpoint", executor_kind="endpoint", profile=None, modeled=False,
                modeled_device=None, device_profile=None, step_model=None, kv_pool=None,
                **_started())


def _started() -> dict:
    return dict(started=now(), complete=False, pid=os.getpid(), host=socket.gethostname())


def _common(workload, trace, gil: str, repeat: int) -> dict:
    sha, date = engine_commit()
    return dict(
        workload=str(workload.path.resolve()), workload_sha256=_sha256(workload.path),
        trace=str(workload.trace_file) if workload.trace_file else "generated",
        trace_sha256=trace.sha256,
        trace_rows=len(trace.df), trace_dropped=trace.dropped, values=workload.values,
        gil_mode=gil, repeat=repeat, switch_interval_s=sys.getswitchinterval(),
        git_sha=sha, git_date=date,
        versions=dict(python=platform.python_version(), steptrace=engine_pkg.__version__,
                      torch=_installed("torch"), numpy=np.__version__),
        host_cpu=_cpu_name(), host_cpus=os.cpu_count())


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _installed(package: str) -> Optional[str]:
    """The installed distribution's version, None where it is not installed; read from its
    metadata: importing torch for its version would cost a modeled run seconds."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def engine_commit(source: Path = Path(__file__)) -> Tuple[Optional[str], Optional[str]]:
    """The commit under test and its date: the environment's (commit_variables: each, else
    None) where either is set, else checkout_commit(source)."""
    given = commit_variables()
    return given if any(given) else checkout_commit(source)


def checkout_commit(source: Path) -> Tuple[Optional[str], Optional[str]]:
    """HEAD and its commit date (ISO 8601) of the repository whose git tracks `source`, a
    file of this package; None, None where none does (outside a checkout, or installed in
    a folder of a repository that does not track it)."""
    folder = source.parent
    tracked = _git(folder, "ls-files", "--error-unmatch", "--", source.name)
    out = _git(folder, "log", "-1", "--format=%H %cI").split() if tracked else []
    return (out[0], out[1]) if len(out) == 2 else (None, None)


def _git(folder: Path, *args: str) -> str:
    """git's output in `folder`; "" where it fails or is not installed."""
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                              text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
