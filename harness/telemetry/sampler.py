"""The run's device sampler: starts and stops its own process, returns the device table.

A process, not a thread: a sampler thread would compete for the GIL the harness is
measuring. Telemetry never fails a run: a child that cannot start, crashes or hangs
costs rows, and the notes say which and why.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Optional

import pandas as pd

from harness.io import child_process
from harness.telemetry.columns import DEVICE_COLUMNS, VALUE_COLUMNS

BACKENDS = ("cuda", "npu", "cpu")
STOP_GRACE_S = 0.5  # beyond one interval, for the child to finish its last samples


class Sampler:
    def __init__(self, backend: str, device_indices, interval_s: float, t0: float, pid: int):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.backend = backend
        self.devices = [int(d) for d in device_indices]
        self.interval_s = float(interval_s)
        self.t0 = t0
        self.pid = pid
        self._process: Optional[subprocess.Popen] = None
        self._dir: Optional[Path] = None  # the child's folder, made before it starts
        self._notes: Dict[str, str] = {}

    def start(self):
        """Launch the child and return at once; it imports no torch and no engine."""
        if self._process is not None:
            raise RuntimeError("sampler already started")
        self._dir = Path(tempfile.mkdtemp(prefix="steptrace-telemetry-"))
        config = {"backend": self.backend, "devices": self.devices,
                  "interval_s": self.interval_s, "t0": self.t0, "pid": self.pid,
                  "out": str(self._dir / "journal.jsonl"), "dir": str(self._dir),
                  "parent": os.getpid()}  # the child removes `dir` if this process dies
        try:
            with open(self._dir / "stderr.txt", "wb") as stderr:
                self._process = subprocess.Popen(
                    child_process.command("harness.telemetry.child", json.dumps(config)),
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr,
                    env=child_process.environment(),
                    start_new_session=True)  # its own group: a kill takes npu-smi along
        except OSError as e:
            self._notes["sampler"] = f"not started: {e}"

    def stop(self):
        """(device table, notes for the manifest), within about interval_s + 1 s."""
        process, self._process = self._process, None
        try:
            if process is not None:
                self._halt(process)
            rows = self._read_journal()
        finally:  # the temporary folder goes, whatever failed above
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
        return device_frame(rows), self._notes

    def _halt(self, process):
        try:
            process.stdin.write(b"stop\n")
            process.stdin.close()
        except BrokenPipeError:  # the child is gone already
            pass
        grace = self.interval_s + STOP_GRACE_S
        try:
            code = process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            self._notes["sampler"] = (f"child did not stop within {grace:g} s; killed, "
                                      "rows up to then kept")
            return
        if code != 0:
            assert self._dir is not None  # a child runs only with its folder
            lines = (self._dir / "stderr.txt").read_text(errors="replace").strip().splitlines()
            self._notes["sampler"] = (f"child exited with {code}: "
                                      f"{lines[-1] if lines else 'no message'}; "
                                      "rows up to then kept")

    def _read_journal(self):
        path = None if self._dir is None else self._dir / "journal.jsonl"
        if path is None or not path.exists():
            return []
        rows, unreadable = [], 0
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill
                unreadable += 1
                continue
            if "row" in entry:
                rows.append(entry["row"])
            else:
                key, text = entry["note"]
                self._notes[key] = text
        if unreadable:
            self._notes["sampler.journal"] = f"{unreadable} unreadable line(s) skipped"
        return rows


def device_frame(rows) -> pd.DataFrame:
    """The device table of these rows (none: an empty table with every column typed)."""
    frame = pd.DataFrame(rows, columns=list(DEVICE_COLUMNS))
    return frame.astype({"t_s": "float64", "source": "object", "device": "int64",
                         **{c: "float64" for c in VALUE_COLUMNS}})
