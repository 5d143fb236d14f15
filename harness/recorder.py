"""The recorder: what each step and request did, streamed to disk in chunks.

Per step it makes one C++ call: engine._core.StepLog copies the plan's rows and the
step's timings and FLOPs into columns and stamps the tokens each request committed; a
request's row joins the request columns when the postprocess result says it left. It is
fed only what the engine hands over (add records, StepRecords), never the engine itself.

Every `chunk_steps` steps the engine's thread moves the columns out of C++ and hands them
to a writer thread, which builds the Arrow tables and writes them (harness/table_sink.py;
Parquet writes release the GIL). The hand-off's time is the step's `flush_ns`. The queue
between the two is bounded, so memory stays bounded by a few chunks, the live requests
(with a running request's own gaps), the distinct inter-token gaps, and the few numbers
per step (and one flag per trace request) the summary needs.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Callable, Dict, List, Optional

import numpy as np
import pandas as pd
import pyarrow as pa

from engine import _core
from engine.plan import KIND_NAMES

from . import metrics
from .table_sink import TableSink, dictionary

# What the engine summary needs of every step, kept in memory for the end of the run.
SUMMARY_STEP_COLUMNS = ("step", "dp_rank", "warmup", "t_start_s", "t_end_s", "sched_call_ns",
                        "sched_cpp_ns", "step_ns", "forward_ns", "model_flops")
REQUEST_COLUMNS = ("request_id", "arrival_s", "enqueue_s", "first_scheduled_s",
                   "first_token_s", "last_token_s", "prompt_len", "max_new_tokens",
                   "output_tokens", "dp_rank", "preemptions", "recomputed_tokens",
                   "prefix_hit_tokens", "status", "reason")  # then metrics.latencies' columns
PHASES = ("decode", "prompt")  # indexed by the prompt_phase flag
QUEUED_CHUNKS = 2  # chunks waiting for the writer before the engine's thread waits


class Recorder:
    def __init__(self, engine, warmup_steps: int, steps: TableSink, batches: TableSink,
                 chunk_steps: int = 1024, requests: Optional[TableSink] = None,
                 trace: Optional[pd.DataFrame] = None) -> None:
        """`requests` (with `trace`, whose row i is request i) streams the requests table."""
        if (requests is None) != (trace is None):
            raise ValueError("the requests table needs the trace, and the trace a table")
        flush = weakref.WeakMethod(self.flush)  # the log must not keep the recorder alive
        self.log = _core.StepLog(warmup_steps, chunk_steps, lambda: flush()())
        self.chunk_steps = chunk_steps
        self._warmup_steps = warmup_steps
        self._finished = "handed_off" if engine.config.scheduler.engine_type == "prompt" \
            else "finished"
        self._sinks = dict(steps=steps, batches=batches, requests=requests)
        self._trace = None if trace is None else dict(
            arrival_s=trace["arrival_s"].to_numpy(np.float64),
            prompt_len=trace["prompt_len"].to_numpy(np.int64),
            max_new_tokens=trace["max_new_tokens"].to_numpy(np.int64))
        n = 0 if trace is None else len(trace)
        self.warm = np.zeros(n, dtype=bool)  # by request_id: first scheduled in warm-up
        self._written = np.zeros(n, dtype=bool)
        self._kept: List[Dict[str, np.ndarray]] = []
        write = weakref.WeakMethod(self._write)
        self._writer = _Writer(lambda chunk: write()(chunk))
        weakref.finalize(self, self._writer.stop)  # a recorder dropped unclosed
        # step(record, t_start_s, t_end_s): one C++ call, flushing every chunk_steps steps
        self.step = self.log.record
        # enqueue(added, t): the SeqRecord LLMEngine.add_request returned, enqueued at t
        self.enqueue = self.log.enqueue

    def flush(self) -> None:
        """Hand the buffered rows to the writer thread (the columns move, nothing is
        copied)."""
        steps = self.log.take_steps()
        for flag in ("prompt_phase", "empty", "warmup"):
            steps[flag] = steps[flag].view(np.bool_)
        self._kept.append({name: steps[name] for name in SUMMARY_STEP_COLUMNS})
        self._writer.put((steps, self.log.take_batches(), self.log.take_requests()))

    def close(self) -> pd.DataFrame:
        """Flush (requests still live as unfinished, trace requests never enqueued last),
        wait for the writer, close the tables, and return the per-step columns the summary
        needs. The tables are closed (whole, renamed into place) even if a write failed;
        the writer's error is raised then."""
        try:
            self.log.end()
            self.flush()
            self._writer.close()
            if self._trace is not None:
                self._sinks["requests"].write(self._requests_table(self._never_enqueued()))
        finally:
            for sink in self._sinks.values():
                if sink is not None:
                    sink.close()
        kept, self._kept = self._kept, []  # each column once: the chunks go as they join
        return pd.DataFrame({name: np.concatenate([k.pop(name) for k in kept])
                             for name in SUMMARY_STEP_COLUMNS}, copy=False)

    @property
    def num_done(self) -> int:
        """Requests finished, handed off or rejected so far."""
        return self.log.num_done

    def itl(self):
        """(gap values, counts) of measured, completed requests."""
        return self.log.itl()

    def _write(self, chunk) -> None:  # on the writer thread
        steps, batches, requests = chunk
        steps["phase"] = dictionary(steps.pop("prompt_phase").view(np.int8), PHASES)
        self._sinks["steps"].write(pa.table(steps))
        batches["kind"] = dictionary(batches["kind"], KIND_NAMES)
        self._sinks["batches"].write(pa.table(batches))
        if self._trace is not None:
            self._sinks["requests"].write(self._requests_table(requests))

    def _requests_table(self, rows: Dict[str, np.ndarray]) -> pa.Table:
        ids = rows["request_id"]
        step = rows.pop("first_scheduled_step")
        self.warm[ids] = (step >= 0) & (step < self._warmup_steps)
        self._written[ids] = True
        names = np.array([self._finished, "rejected", "unfinished"], dtype=object)
        columns = {**{name: self._trace[name][ids] for name in self._trace}, **rows}
        columns = {name: columns[name] for name in REQUEST_COLUMNS if name in columns}
        columns.update(metrics.latency_columns(columns))
        columns["status"] = pa.array(names[rows["status"]], pa.string())
        columns["reason"] = pa.array(rows["reason"], pa.string())
        return pa.table(columns)

    def _never_enqueued(self) -> Dict[str, np.ndarray]:
        ids = np.flatnonzero(~self._written)
        n = len(ids)
        never = np.full(n, np.nan)
        return dict(request_id=ids.astype(np.int64), enqueue_s=never,
                    first_scheduled_s=never, first_token_s=never, last_token_s=never,
                    first_scheduled_step=np.full(n, -1, np.int64),
                    output_tokens=np.zeros(n, np.int64), dp_rank=np.full(n, -1, np.int32),
                    preemptions=np.zeros(n, np.int32), recomputed_tokens=np.zeros(n, np.int64),
                    prefix_hit_tokens=np.zeros(n, np.int64),
                    status=np.full(n, 2, np.uint8), reason=["never enqueued"] * n)


class _Writer:
    """A thread that calls write(chunk) for each chunk put, in order. After an error it
    drops what comes (the engine's thread never waits on a dead writer); close() raises
    the error."""

    def __init__(self, write: Callable) -> None:
        self._write = write
        self._queue: queue.Queue = queue.Queue(QUEUED_CHUNKS)
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="recorder-writer", daemon=True)
        self._thread.start()

    def put(self, chunk) -> None:
        self._queue.put(chunk)

    def stop(self) -> None:
        self._queue.put(None)

    def close(self) -> None:
        self.stop()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            chunk = self._queue.get()
            if chunk is None:
                return
            if self._error is None:
                try:
                    self._write(chunk)
                except BaseException as error:  # raised again on the engine's thread
                    self._error = error
            self._queue.task_done()  # queue.join() waits for the chunks put so far
