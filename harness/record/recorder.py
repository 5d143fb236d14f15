"""The recorder: what each step and request did, streamed to disk in chunks.

Per step it makes one C++ call: engine._core.StepLog copies the plan's rows and the
step's timings and FLOPs into columns and stamps the tokens each request committed; a
request's row joins the request columns when the postprocess result says it left. It is
fed only what the engine hands over (add records, StepRecords), never the engine itself.

Every `chunk_steps` steps the engine's thread moves the columns out of C++ and queues
them (the hand-off's time is the step's `flush_ns`). A sender thread completes the
request rows (the trace's columns, the latencies; the latency summary keeps its values)
and pipes each chunk's columns, raw, to the table writer's own process
(harness/record/table_writer.py), which encodes and writes them without this process's GIL. The
queue is bounded, so memory stays bounded by a few chunks, the live requests (with a
running request's own gaps), the distinct inter-token gaps, one value per latency metric
of each measured request, and the few numbers per step (and two flags per trace request)
the summaries need.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from engine import _core

from ..schema.tables import PD_COLUMNS, REQUESTS, STEPS
from ..schema.values import FRONTEND_COLUMNS
from . import metrics
from .step_summary import StepSummary
from .table_writer import Column, TableWriter, coded

# the trace and the step log give the first columns, metrics.latency_columns and the
# frontend the rest
REQUEST_COLUMNS = REQUESTS.names
STATUS = REQUESTS.column("status")  # its codes are the step log's request ends
ROLE = STEPS.column("role")
# what the P/D summary rows read of each request (harness/record/pd_summary.py)
SESSION_COLUMNS = ("session_id", "turn")  # a session trace's; -1 for a request trace's
PD_TIMES = ("handoff_s", "transfer_start_s", "transfer_end_s", "decode_wait_s")
QUEUED_CHUNKS = 2  # chunks waiting for the sender before the engine's thread waits


class Recorder:
    def __init__(self, engine, warmup_steps: int, run_dir, fmt: str = "parquet",
                 labels: Optional[Dict[str, object]] = None, chunk_steps: int = 1024,
                 trace: Optional[pd.DataFrame] = None, frontend=None,
                 slo: Optional[Dict[str, float]] = None) -> None:
        """Streams the steps and batches tables into run_dir, and with `trace` (whose row
        i is request i) the requests table; with a `frontend` (harness/replay/frontend.py) its
        columns are the frontend's, else NaN. `slo` (seconds by ttft/tpot/e2e) adds goodput
        to the latency summary. `engine`: a co-located run's engine (its engine type names
        its requests' ends), or the (role, index) of each instance of a P/D deployment,
        each recorded in its own step log (`logs`): a prefill instance's keeps each request
        it hands off until a decode instance's log takes it in and writes its one row."""
        flush = weakref.WeakMethod(self.flush)  # the log must not keep the recorder alive
        pools = isinstance(engine, (list, tuple))
        self.instances: Tuple[Tuple[str, int], ...] = tuple(engine) if pools \
            else (("colocated", 0),)
        prompt = not pools and engine.config.scheduler.engine_type == "prompt"
        self.logs = [_core.StepLog(warmup_steps, chunk_steps, lambda: _alive(flush)(),
                                   handoff="kept" if role == "prefill" else
                                   "row" if prompt else "none", instance=index)
                     for role, index in self.instances]
        self.log, self.chunk_steps = self.logs[0], chunk_steps
        self._warmup_steps, self._frontend = warmup_steps, frontend
        self._status = np.array(STATUS.names_by_code(), dtype=object)
        self._trace = None if trace is None else trace_columns(trace)
        n = 0 if trace is None else len(trace)
        self._known = n  # the trace requests there are: the first ones
        self.warm = np.zeros(n, dtype=bool)  # by request_id: first scheduled in warm-up
        self._written = np.zeros(n, dtype=bool)
        self.latency = metrics.LatencySummary(n, slo)  # the requests written so far
        # the steps written so far, by role
        self.step_summaries = {role: StepSummary() for role, _ in self.instances}
        self.step_summary = self.step_summaries[self.instances[0][0]]
        # (prefix-hit tokens, prompt tokens computed) of each prefill instance's measured
        # steps, by instance (P/D)
        self.prefix_hits: Dict[int, list] = {}
        # P/D: the requests' hand-off and transfer times, by request_id, as their rows say
        self.pd_times = {name: np.full(n, np.nan) for name in PD_TIMES} if pools else None
        names = ["steps", "batches"] + ([] if trace is None else ["requests"])
        self._tables = TableWriter(run_dir, fmt, names, labels, coded(names))
        write = weakref.WeakMethod(self._write)
        self._sender = _Sender(lambda chunk: _alive(write)(chunk))
        weakref.finalize(self, self._sender.stop)  # a recorder dropped unclosed
        # step(record, t_start_s, t_end_s): one C++ call, flushing every chunk_steps steps
        self.step = self.log.record
        # enqueue(added, t): the SeqRecord LLMEngine.add_request returned, enqueued at t
        self.enqueue = self.log.enqueue

    def tables_ready(self) -> None:
        """Waits until the table writer serves the run (else NotStarted); without this
        call the first chunk waits for it, while the run goes on."""
        self._tables.ready()

    def flush(self) -> None:
        """Hand the buffered rows to the sender thread (the columns move, nothing is
        copied). A table that could not be written stops the run here: its error is
        raised, and close() names the table."""
        self._sender.check()
        published = self._frontend.published if self._frontend else 0
        self._sender.put(([(log.take_steps(), log.take_batches(), log.take_requests())
                           for log in self.logs], published))

    def close(self) -> None:
        """Flush (requests still live as unfinished, trace requests never enqueued last),
        wait for the sender and close the tables: whole, renamed into place, even if
        sending failed; the first error is raised then. A table that could not be written
        is not left behind."""
        try:
            for log in self.logs:
                log.end()
            self.flush()
            self._sender.close()
            if self._trace is not None:
                for rows in self._unjoined():
                    self._tables.write(dict(requests=self._requests_columns(rows)))
                self._tables.write(dict(requests=self._requests_columns(self._never_enqueued())))
        finally:
            self._tables.close()

    def arrived(self, request_id: int, t: float) -> None:
        """A closed loop's request arrived at `t` (harness/replay/driver.py), not at the
        trace's time: its latencies count from then."""
        assert self._trace is not None, "a closed loop replays a trace"
        self._trace["arrival_s"][request_id] = t

    def serving(self) -> None:
        """From now on the trace's rows are a server's capacity (harness/serve/), none a
        request until admit() says so."""
        assert self._trace is not None and self._known == len(self.warm), "before any"
        self._trace = {name: column.copy() for name, column in self._trace.items()}
        self._known = 0

    def admit(self, request_id: int, arrival_s: float, prompt_len: int,
              max_new_tokens: int) -> None:
        """A served request's trace row, known as it arrives (harness/serve/), ids in
        order: the capacity's rows after the last one admitted are no request."""
        assert self._trace is not None and request_id == self._known, "ids in order"
        for name, value in (("arrival_s", arrival_s), ("prompt_len", prompt_len),
                            ("max_new_tokens", max_new_tokens)):
            self._trace[name][request_id] = value
        self._known += 1

    @property
    def arrival_s(self) -> np.ndarray:
        """Each trace request's arrival, by request_id: a closed loop writes its releases
        here (arrived())."""
        assert self._trace is not None, "a replay records a trace"
        return self._trace["arrival_s"]

    @property
    def max_new_tokens(self) -> np.ndarray:
        """Each trace request's max_new_tokens, by request_id (a server's: as admitted)."""
        assert self._trace is not None, "a replay records a trace"
        return self._trace["max_new_tokens"]

    @property
    def num_done(self) -> int:
        """Requests finished, handed off or rejected so far (a co-located instance)."""
        return self.log.num_done

    def retained_bytes(self) -> Tuple[int, int]:
        """What the recorder keeps to the run's end for the summary's exact answers, in
        bytes: (its arrays by trace request: the arrivals it copied, two flags, the latency
        values, a P/D deployment's transfer times; the step summaries' per-step values). The
        inter-token gaps (a count per distinct gap, in C++) are not counted."""
        trace = [a for a in (self._trace or {}).values() if a.base is None]  # not views
        requests = sum(a.nbytes for a in (*trace, self.warm, self._written,
                                          *(self.pd_times or {}).values())) \
            + self.latency.nbytes
        return requests, sum(s.nbytes for s in self.step_summaries.values())

    def itl(self):
        """(gap values, counts) of measured, completed requests, over every instance."""
        parts = [log.itl() for log in self.logs]
        return tuple(np.concatenate(column) for column in zip(*parts))

    def _write(self, chunk) -> None:  # on the sender thread
        parts, published = chunk
        if self._frontend is not None:  # the chunk's requests delivered all they committed
            self._frontend.wait(published)
        steps, batches, requests = [], [], []
        for (role, index), part in zip(self.instances, parts):
            if part is None:  # an instance of rank processes that sent no chunk yet
                continue
            s, b, r = part
            for flag in ("empty", "warmup"):
                s[flag] = s[flag].view(np.bool_)
            s["phase"] = s.pop("prompt_phase").view(np.int8)
            self.step_summaries[role].add(s)
            if role == "prefill":  # a P/D summary's hit rate per prefill instance
                measured = ~s["warmup"]
                counts = self.prefix_hits.setdefault(index, [0, 0])
                counts[0] += int(s["prefix_hit_tokens"][measured].sum())
                counts[1] += int(s["prefill_tokens_q"][measured].sum())
            for table in (s, b):
                n = len(table["step"])
                table["role"] = np.full(n, ROLE.code(role), np.int8)
                table["instance"] = np.full(n, index, np.int32)
            r["reason"] = np.asarray(r["reason"], dtype=object)  # the log hands a list of str
            steps.append(s)
            batches.append(b)
            requests.append((role, r))
        tables: Dict[str, Mapping[str, Column]] = dict(steps=_concat(steps),
                                                       batches=_concat(batches))
        if self._trace is not None:
            tables["requests"] = self._requests_columns(_concat(self._joined(requests)))
        self._tables.write(tables)

    def _requests_columns(self, rows: Dict[str, np.ndarray]) -> Dict[str, Column]:
        """The requests table's columns for these rows; the latency summary takes them."""
        assert self._trace is not None  # the requests table is written only with a trace
        ids = rows["request_id"]
        step = rows.pop("first_scheduled_step")
        warm = (step >= 0) & (step < self._warmup_steps)
        self.warm[ids] = warm
        self._written[ids] = True
        if self.pd_times is not None:
            for name, column in self.pd_times.items():
                column[ids] = rows[name]
        columns = {**{name: self._trace[name][ids] for name in self._trace}, **rows}
        columns = {name: columns[name] for name in REQUEST_COLUMNS if name in columns}
        columns.update(metrics.latency_columns(columns))
        columns.update(self._frontend.columns(ids) if self._frontend else
                       {name: np.full(len(ids), np.nan) for name in FRONTEND_COLUMNS})
        columns["status"] = self._status[rows["status"]]
        self.latency.add(columns, warm)
        return columns

    def _never_enqueued(self) -> Dict[str, np.ndarray]:
        ids = np.flatnonzero(~self._written[:self._known])
        n = len(ids)
        never = np.full(n, np.nan)
        return dict(request_id=ids.astype(np.int64), enqueue_s=never,
                    first_scheduled_s=never, first_token_s=never, last_token_s=never,
                    decode_stall_s=np.zeros(n),
                    first_scheduled_step=np.full(n, -1, np.int64),
                    output_tokens=np.zeros(n, np.int64), dp_rank=np.full(n, -1, np.int32),
                    preemptions=np.zeros(n, np.int32), recomputed_tokens=np.zeros(n, np.int64),
                    prefix_hit_tokens=np.zeros(n, np.int64),
                    status=np.full(n, STATUS.code("unfinished"), np.uint8),
                    reason=np.full(n, "never enqueued", dtype=object),
                    **{c.name: np.full(n, c.missing, c.type.to_pandas_dtype())
                       for c in PD_COLUMNS})

    def _joined(self, parts: Sequence[Tuple[str, Mapping[str, np.ndarray]]]) \
            -> Sequence[Mapping[str, np.ndarray]]:
        """A chunk's requests rows ((role, rows) of each instance): each request's one row
        (the step logs write it)."""
        return [rows for _, rows in parts]

    def _unjoined(self) -> Sequence[Dict[str, np.ndarray]]:
        """At the run's end, once every chunk is written: the rows no chunk held."""
        return ()


class _Sender:
    """A thread that calls write(chunk) for each chunk put, in order. After an error it
    drops what comes (the engine's thread never waits on a dead writer); close() raises
    the error."""

    def __init__(self, write: Callable) -> None:
        self._write = write
        self._queue: queue.Queue = queue.Queue(QUEUED_CHUNKS)
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="recorder-sender", daemon=True)
        self._thread.start()

    def put(self, chunk) -> None:
        self._queue.put(chunk)

    def stop(self) -> None:
        self._queue.put(None)

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        self.stop()
        self._thread.join()
        self.check()

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


def trace_columns(trace: pd.DataFrame) -> Dict[str, np.ndarray]:
    """The requests table's columns the trace gives, by request_id (session_id and turn
    -1 for a request trace's); arrival_s and prompt_len copies, for a replay to set."""
    return dict(arrival_s=trace["arrival_s"].to_numpy(np.float64, copy=True),
                prompt_len=trace["prompt_len"].to_numpy(np.int64, copy=True),
                max_new_tokens=trace["max_new_tokens"].to_numpy(np.int64),
                **{name: trace[name].to_numpy(np.int64) if name in trace
                   else np.full(len(trace), -1, np.int64) for name in SESSION_COLUMNS})


def _alive(ref: weakref.WeakMethod) -> Callable:
    method = ref()
    assert method is not None  # the StepLog and the sender live no longer than the recorder
    return method


def _concat(parts: Sequence[Mapping[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """Tables' columns, one table after the other (one table: itself)."""
    if len(parts) == 1:
        return dict(parts[0])
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
