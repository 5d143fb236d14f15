"""One run of a workload in this process, its memory read in two phases from
/proc/self/status: the peak resident set (VmHWM) while the trace is loaded (generated or
read), then, the peak reset (/proc/self/clear_refs), the resident set once it is loaded and
the peak through the replay, its tables and summary. Prints them as JSON, in MB.

    python -m tests.bench.replay_rss WORKLOAD.yaml [--set KEY=VALUE...]
"""

import gc
import json
import sys
from pathlib import Path

from harness.sweeps import sweep
from harness.workload import load_workload


def status_mb(field: str) -> float:
    """A /proc/self/status figure (kB there), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def main(argv) -> dict:
    path, sets = argv[0], [v for k, v in zip(argv[1::2], argv[2::2]) if k == "--set"]
    figures: dict = {}
    load = sweep.load_workload_trace

    def loaded(workload):
        trace = load(workload)
        gc.collect()
        figures.update(trace_peak_mb=status_mb("VmHWM"), loaded_mb=status_mb("VmRSS"),
                       turns=len(trace.df))
        Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
        return trace

    sweep.load_workload_trace = loaded
    sweep.run_workload(load_workload(Path(path), sets))
    figures["replay_peak_mb"] = status_mb("VmHWM")
    return figures


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
