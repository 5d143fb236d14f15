"""The recorder: what each step and request did, streamed to disk in chunks.

Per step it makes one C++ call: engine._core.StepLog copies the plan's rows and the
step's timings and FLOPs into columns and stamps the tokens each request committed. Every
`chunk_steps` steps the rows go to the steps and batches tables on disk
(harness/table_sink.py). Memory stays bounded by the chunk, the requests (with a running
request's own gaps), the distinct inter-token gaps, and the few numbers per step the
summary needs.
"""

from __future__ import annotations

import weakref
from typing import Dict, List

import numpy as np
import pandas as pd
import pyarrow as pa

from engine import _core
from engine.plan import KIND_NAMES

from .table_sink import TableSink, dictionary

# What the engine summary needs of every step, kept in memory for the end of the run.
SUMMARY_STEP_COLUMNS = ("step", "dp_rank", "warmup", "t_start_s", "t_end_s", "sched_call_ns",
                        "sched_cpp_ns", "step_ns", "forward_ns", "model_flops")
PHASES = ("decode", "prompt")  # indexed by the prompt_phase flag


class Recorder:
    def __init__(self, engine, warmup_steps: int, steps: TableSink, batches: TableSink,
                 chunk_steps: int = 1024) -> None:
        flush = weakref.WeakMethod(self.flush)  # the log must not keep the recorder alive
        self.log = _core.StepLog(engine.scheduler, warmup_steps, chunk_steps,
                                 lambda: flush()())
        self.chunk_steps = chunk_steps
        self._sinks = dict(steps=steps, batches=batches)
        self._kept: List[Dict[str, np.ndarray]] = []
        # step(record, t_start_s, t_end_s): one C++ call, flushing every chunk_steps steps
        self.step = self.log.record

    def enqueue(self, request_id: int, actual_s: float) -> None:
        self.log.enqueue(request_id, actual_s)

    def flush(self) -> None:
        """Write the buffered rows to the sinks."""
        steps = self.log.take_steps()
        for flag in ("prompt_phase", "empty", "warmup"):
            steps[flag] = steps[flag].view(np.bool_)
        self._kept.append({name: steps[name] for name in SUMMARY_STEP_COLUMNS})
        steps["phase"] = dictionary(steps.pop("prompt_phase").view(np.int8), PHASES)
        steps["flush_ns"] = np.zeros(len(steps["step"]), np.int64)  # not yet measured
        self._sinks["steps"].write(pa.table(steps))
        batches = self.log.take_batches()
        batches["kind"] = dictionary(batches["kind"], KIND_NAMES)
        self._sinks["batches"].write(pa.table(batches))

    def close(self) -> pd.DataFrame:
        """Flush, close the tables, and return the per-step columns the summary needs.
        The tables are closed (whole, renamed into place) even if the flush fails."""
        try:
            self.flush()
        finally:
            for sink in self._sinks.values():
                sink.close()
        return pd.DataFrame({name: np.concatenate([k[name] for k in self._kept])
                             for name in SUMMARY_STEP_COLUMNS})

    @property
    def num_done(self) -> int:
        """Requests finished, handed off or rejected so far."""
        return self.log.num_done

    def requests(self) -> Dict[str, np.ndarray]:
        """Per-request times in the scheduler's add order (the replay adds request i i-th)."""
        return self.log.requests()

    def itl(self):
        """(gap values, counts) of measured, completed requests."""
        return self.log.itl()
