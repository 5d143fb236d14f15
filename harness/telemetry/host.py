"""The host through psutil: the harness process's and the machine's CPU and memory.

Always sampled, so that a CPU-only run still has a device table.
- process_cpu_pct: CPU time of the process (all its threads) over the last interval,
  as a percentage of one core: 150 means one and a half cores busy.
- host_cpu_pct: the machine's CPU time over the last interval, 0-100 across all cores.
- host_mem_used_bytes: total minus available, the memory the kernel could not free.
"""

import threading
import time
from typing import Optional

import psutil

from harness.telemetry.columns import HOST_DEVICE, row

# psutil's CPU percentages are over the interval since the previous call (the host's, since
# the previous call in the same thread): a first call only starts that interval, and over
# less than two of the kernel's 10 ms ticks they read 0. Such a sample leaves them out and
# the next one covers the interval.
MIN_CPU_INTERVAL_S = 0.02


class HostSource:
    name = "cpu"

    def __init__(self, pid: int, period_s: float, clock):
        self.period_s = period_s
        self._clock = clock
        self.notes = {"cpu": f"psutil {psutil.__version__}: process {pid} and host, "
                             f"every {period_s:g} s"}
        self._cpu_thread: Optional[int] = None  # the thread psutil counts the host interval in
        self._cpu_since = 0.0
        try:
            self._process = psutil.Process(pid)
        except psutil.Error as e:
            self._process = None
            self.notes["cpu.process"] = f"unavailable: {e}"

    def sample(self) -> list:
        t = self._clock()
        memory = psutil.virtual_memory()
        values = {"host_mem_used_bytes": memory.total - memory.available}
        first = self._cpu_thread != threading.get_ident()
        cpu = first or time.monotonic() - self._cpu_since >= MIN_CPU_INTERVAL_S
        if cpu:
            host = psutil.cpu_percent(None)
            self._cpu_thread, self._cpu_since = threading.get_ident(), time.monotonic()
            if not first:
                values["host_cpu_pct"] = host
        if self._process is not None:
            try:
                with self._process.oneshot():
                    values["process_rss_bytes"] = self._process.memory_info().rss
                    if cpu:
                        process = self._process.cpu_percent(None)
                        if not first:
                            values["process_cpu_pct"] = process
            except psutil.Error as e:
                self._process = None
                self.notes["cpu.process"] = f"gone at t={t:.3f} s: {e}"
        return [row(t, "cpu", HOST_DEVICE, **values)]

    def close(self):
        pass
