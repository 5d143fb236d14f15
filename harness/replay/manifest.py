"""A run's manifest as it starts: what ran (the workload, its trace, the engine, the device
and its profile), where (host, versions, git commit) and who writes it (pid, host: `show`
tells a killed run from a running one by them)."""

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


def manifest(workload, trace, engine, gil: str, repeat: int) -> dict:
    modeled = ExecutorSpec.parse(engine.config.executor).modeled
    sha, date = _git_commit()
    return dict(
        workload=str(workload.path.resolve()), workload_sha256=_sha256(workload.path),
        trace=str(workload.trace_file) if workload.trace_file else "generated",
        trace_sha256=trace.sha256,
        trace_rows=len(trace.df), trace_dropped=trace.dropped, values=workload.values,
        gil_mode=gil, repeat=repeat, switch_interval_s=sys.getswitchinterval(),
        git_sha=sha, git_date=date,
        versions=dict(python=platform.python_version(), steptrace=engine_pkg.__version__,
                      torch=_installed("torch"), numpy=np.__version__),
        host_cpu=_cpu_name(), host_cpus=os.cpu_count(),
        device=dict(backend=engine.device.backend, name=engine.device.name,
                    chip=engine.device.chip, capability=engine.device.capability),
        executor=engine.config.executor, modeled=modeled,
        modeled_device=engine.device_profile.name if modeled else None,
        device_profile=profile_record(engine.device_profile) if engine.device_profile else None,
        kv_pool=engine.kv_pool.manifest() if engine.kv_pool else None,
        started=now(), complete=False, pid=os.getpid(), host=socket.gethostname())


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _installed(package: str) -> Optional[str]:
    """The installed distribution's version, None where it is not installed; read from its
    metadata: importing torch for its version would cost a modeled run seconds."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit() -> Tuple[Optional[str], Optional[str]]:
    """The checkout's HEAD and its commit date (ISO 8601); None, None outside one."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%H %cI"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, timeout=5).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (out[0], out[1]) if len(out) == 2 else (None, None)


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
