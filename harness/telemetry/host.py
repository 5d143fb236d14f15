"""The host through psutil: the harness process's and the machine's CPU and memory.

Always sampled, so that a CPU-only run still has a device table.
- process_cpu_pct: CPU time of the process (all its threads) over the last interval,
  as a percentage of one core: 150 means one and a half cores busy.
- host_cpu_pct: the machine's CPU time over the last interval, 0-100 across all cores.
- host_mem_used_bytes: total minus available, the memory the kernel could not free.
"""

import psutil

from harness.telemetry.columns import HOST_DEVICE, row


class HostSource:
    name = "cpu"

    def __init__(self, pid: int, period_s: float, clock):
        self.period_s = period_s
        self._clock = clock
        self.notes = {"cpu": f"psutil {psutil.__version__}: process {pid} and host, "
                             f"every {period_s:g} s"}
        psutil.cpu_percent(None)  # a first call only starts the measured interval
        try:
            self._process = psutil.Process(pid)
            self._process.cpu_percent(None)
        except psutil.Error as e:
            self._process = None
            self.notes["cpu.process"] = f"unavailable: {e}"

    def sample(self) -> list:
        t = self._clock()
        memory = psutil.virtual_memory()
        values = {"host_cpu_pct": psutil.cpu_percent(None),
                  "host_mem_used_bytes": memory.total - memory.available}
        if self._process is not None:
            try:
                with self._process.oneshot():
                    values.update(process_cpu_pct=self._process.cpu_percent(None),
                                  process_rss_bytes=self._process.memory_info().rss)
            except psutil.Error as e:
                self._process = None
                self.notes["cpu.process"] = f"gone at t={t:.3f} s: {e}"
        return [row(t, "cpu", HOST_DEVICE, **values)]

    def close(self):
        pass
