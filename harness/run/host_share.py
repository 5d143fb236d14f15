"""What else ran on the host during a run: other processes' CPU and the hypervisor's steal
time, from psutil's counters at the start and the end (this process and its children, the
table writer and the telemetry sampler, are the run's own). A run above the threshold is
flagged contaminated: its timings shared the cores (docs/gil.md)."""

from __future__ import annotations

import psutil


def _own_cpu_s(process: psutil.Process, seen: dict) -> None:
    """CPU seconds of the process and its live children, by pid, into `seen`."""
    for p in [process] + process.children(recursive=True):
        try:
            t = p.cpu_times()
            seen[p.pid] = t.user + t.system
        except psutil.Error:  # gone between the listing and the reading: its last value stays
            pass


class HostShare:
    def __init__(self, threshold_pct: float) -> None:
        self.threshold_pct = threshold_pct
        self._process = psutil.Process()
        self._own_start: dict = {}
        _own_cpu_s(self._process, self._own_start)
        self._host_start = psutil.cpu_times()

    def stop(self) -> dict:
        """other_cpu_pct, steal_pct (of the whole host's CPU time), contaminated, threshold."""
        host = psutil.cpu_times()
        own: dict = dict(self._own_start)
        _own_cpu_s(self._process, own)
        own_s = sum(own.values()) - sum(self._own_start.values())
        busy_s = _busy(host) - _busy(self._host_start)
        steal_s = getattr(host, "steal", 0.0) - getattr(self._host_start, "steal", 0.0)
        # the host's CPU time as its kernel counted it over the run (busy, idle, waiting,
        # stolen), not wall x cores: the two counters then share one clock, and the shares
        # cannot sum past 100 % on a short run
        capacity = _total(host) - _total(self._host_start)
        other = max(0.0, 100.0 * (busy_s - own_s) / capacity) if capacity > 0 else float("nan")
        steal = 100.0 * steal_s / capacity if capacity > 0 else float("nan")
        return dict(other_cpu_pct=other, steal_pct=steal, threshold_pct=self.threshold_pct,
                    contaminated=bool(other + steal > self.threshold_pct))


def _busy(t) -> float:
    """CPU seconds spent on work (guest time is already inside user time)."""
    return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))


def _total(t) -> float:
    """All the host's CPU seconds: work, idle, I/O wait and steal (guest time is inside
    user time)."""
    return _busy(t) + sum(getattr(t, name, 0.0) for name in ("idle", "iowait", "steal"))
