"""The serving frontend of a real-clock replay: an API server's thread beside the engine.

A thread runs an asyncio loop, as an API server does. One task injects each request at its
trace time into a thread-safe queue, stamping when it actually enqueued (enqueue drift =
that stamp - the intended arrival: the harness's own fidelity). The engine's loop drains
the queue before every schedule() and never waits on it while it has work. After every
step the engine's loop publishes the tokens it committed (each row's output length); a
second task takes them, does `per_token_us` of Python work per token (the GIL held, as
detokenizing and streaming hold it) and stamps when each token reached it (delivery delay
= that stamp - the commit time). Which of the two threads runs when is the GIL's choice:
that is what a GIL A/B comparison measures (docs/gil.md).

A session trace's turns (sessions.py's Turns) are injected as their parents end: the
injecting task enqueues each turn when it is due, its arrival that time; the delivering
task, having delivered a step's tokens, ends the turns that left the engine with it (their
last token delivered, as a client's stream ends), and the engine's thread tells it of a
turn rejected as it came (ended()). Either wakes the injecting task.

Closing delivers every token published, however long that takes. Once a signal has stopped
the run (`stop` set) the tokens not yet delivered are abandoned (counted, no work, no
delay), the token in progress included, at once: the engine's thread, waiting for the
frontend to catch up or closing it, is never held by a frontend far behind.

Memory: a few numbers per trace request, each live request's delays until it leaves, and
the delays of every token as a histogram of whole microseconds.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter
from typing import Dict, Optional

import numpy as np
import pandas as pd

from ..record.metrics import SUMMARY_COLUMNS, describe
from ..workload.schema import PER_TOKEN_US
from .sessions import Turns


class Frontend:
    def __init__(self, arrivals: np.ndarray, per_token_us: float = PER_TOKEN_US,
                 warmup_steps: int = 0, stop: Optional[threading.Event] = None) -> None:
        """`arrivals`: intended enqueue times (s, sorted), request i at arrivals[i];
        `stop`: the run's stop flag (harness/io/interrupt.py), read per token."""
        self._arrivals = np.ascontiguousarray(arrivals, np.float64).data
        n = len(self._arrivals)
        self._start = 0.0
        self._work_ns = int(round(per_token_us * 1e3))
        self._warmup_steps = warmup_steps
        self.requests: queue.SimpleQueue = queue.SimpleQueue()  # request ids, as enqueued
        self._drift = np.full(n, np.nan)
        self._taken = np.zeros(n, np.int64)  # by request id: its tokens delivered or abandoned
        self._undelivered = 0  # tokens abandoned
        self._stop = threading.Event() if stop is None else stop
        self._p50 = np.full(n, np.nan)
        self._max = np.full(n, np.nan)
        self._live: Dict[int, list] = {}  # request_id -> its tokens' delays so far
        self._histogram: Counter = Counter()  # delay in whole us -> tokens (measured steps)
        self._published = 0
        self._processed = 0
        self._progress = threading.Condition()
        self._cpu_s = self._wall_s = 0.0
        self._error: Optional[BaseException] = None
        self._loop = asyncio.new_event_loop()
        self._events: Optional[asyncio.Queue] = None
        self._stopped: Optional[asyncio.Future] = None
        self._turns: Optional[Turns] = None
        self._due = np.empty(0)  # by request id: when a session's turn came due
        self._wake: Optional[asyncio.Event] = None  # a turn ended
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="frontend", daemon=True)

    def start(self, start: float, turns: Optional[Turns] = None) -> None:
        """Run from `start`, the perf_counter() value of the real clock's zero; with `turns`,
        a session trace's, each enqueued when it is due (arrival() then says when)."""
        self._start, self._turns = start, turns
        if turns is not None:  # the arrivals are known as the turns come due
            self._due = np.full(len(self._arrivals), np.nan)
        self._thread.start()
        self._ready.wait()

    def arrival(self, request_id: int) -> float:
        """When an enqueued session turn came due (engine thread, once it took it)."""
        return float(self._due[request_id])

    def ended(self, request_id: int, t: float) -> None:
        """A session turn rejected as it came, at t on the run's clock (engine thread)."""
        self._loop.call_soon_threadsafe(self._turn_ended, request_id, t)

    def publish(self, record, commit_s: float) -> None:
        """The tokens a step committed, at commit_s on the run's clock (engine thread)."""
        # Copies: a view would keep the plan from being reused (docs/scheduling.md).
        ids = np.concatenate([b.seq_ids for b in record.batches])
        left = [r.seq_id for r in record.post.left]
        event = (record.step, commit_s, ids, np.array(record.post.output_len), left)
        self._published += 1
        assert self._events is not None, "made before start() returns"
        self._loop.call_soon_threadsafe(self._events.put_nowait, event)

    @property
    def published(self) -> int:
        return self._published

    def wait(self, published: int) -> None:
        """Until the events published so far (a count from `published`) are processed."""
        with self._progress:
            self._progress.wait_for(lambda: self._processed >= published or self._error)
        if self._error is not None:
            raise RuntimeError(f"the frontend thread failed: {self._error!r}") from self._error

    def close(self) -> None:
        """Deliver every published token (once `stop` is set: abandon them), then stop the
        thread. Idempotent."""
        if self._thread.is_alive():
            try:
                self.wait(self._published)
            finally:
                assert self._stopped is not None, "made before start() returns"
                self._loop.call_soon_threadsafe(self._stopped.set_result, None)
                self._thread.join()
        elif not self._loop.is_closed():  # never started: its thread would have closed it
            self._loop.close()
        for request_id in list(self._live):  # unfinished: what was delivered so far
            self._settle(request_id)

    def columns(self, ids: np.ndarray) -> Dict[str, np.ndarray]:
        """The requests table's frontend columns for these request ids."""
        return dict(enqueue_drift_s=self._drift[ids], delivery_delay_p50_s=self._p50[ids],
                    delivery_delay_max_s=self._max[ids])

    def summary(self, measured: np.ndarray) -> pd.DataFrame:
        """Summary rows: enqueue drift over the measured requests (a mask by request id),
        delivery delay over the tokens of measured steps, the thread's CPU share of its
        time running, and the tokens a stop abandoned (of every step)."""
        rows = []
        drift = describe(self._drift[measured])
        delay = describe(np.fromiter(self._histogram, np.float64, len(self._histogram)) / 1e6,
                         np.fromiter(self._histogram.values(), np.int64, len(self._histogram)))
        for metric, stats in (("enqueue_drift", drift), ("delivery_delay", delay)):
            rows += [(metric, stat, float(x), "samples" if stat == "count" else "s")
                     for stat, x in stats.items()]
        share = 100.0 * self._cpu_s / self._wall_s if self._wall_s > 0 else float("nan")
        rows.append(("frontend", "cpu_share", share, "% of one core"))
        rows.append(("frontend", "undelivered", float(self._undelivered), "tokens"))
        return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))

    def _run(self) -> None:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._cpu_s, self._wall_s = time.thread_time() - cpu, time.perf_counter() - wall
            self._loop.close()

    async def _main(self) -> None:
        self._events = asyncio.Queue()
        self._stopped = self._loop.create_future()
        self._wake = asyncio.Event()
        inject = self._inject() if self._turns is None else self._inject_turns(self._turns)
        tasks = [asyncio.create_task(inject), asyncio.create_task(self._deliver())]
        self._ready.set()
        await self._stopped
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _inject(self) -> None:
        for i, arrival in enumerate(self._arrivals):
            delay = arrival - (time.perf_counter() - self._start)
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.perf_counter() - self._start
            self._drift[i] = now - arrival
            self.requests.put(i)

    async def _inject_turns(self, turns: Turns) -> None:
        wake = self._wake
        assert wake is not None, "made before this task"
        while True:
            now = time.perf_counter() - self._start
            for t, i in turns.due(now):
                self._due[i] = t
                self._drift[i] = now - t
                self.requests.put(i)
            wake.clear()
            if not turns.events:
                await wake.wait()
                continue
            try:
                await asyncio.wait_for(wake.wait(), turns.events[0][0] - now)
            except asyncio.TimeoutError:
                pass

    def _turn_ended(self, request_id: int, t: float) -> None:
        assert self._turns is not None and self._wake is not None, "a session replay's"
        self._turns.ended(request_id, t)
        self._wake.set()

    async def _deliver(self) -> None:
        try:
            await self._delivering()
        except Exception as error:  # wait() raises it on the engine's thread
            with self._progress:
                self._error = error
                self._progress.notify_all()

    async def _delivering(self) -> None:
        work_ns, stopped = self._work_ns, self._stop.is_set
        events = self._events
        assert events is not None, "made before this task"
        while True:
            step, commit_s, ids, output_len, left = await events.get()
            measured = step >= self._warmup_steps
            for seq_id, total in zip(ids.tolist(), output_len.tolist()):
                delays = self._live.setdefault(seq_id, [])
                tokens = total - int(self._taken[seq_id])
                self._taken[seq_id] = total
                for k in range(tokens):
                    deadline = time.perf_counter_ns() + work_ns
                    while time.perf_counter_ns() < deadline and not stopped():
                        pass  # detokenize, stream
                    if stopped():  # this token and the rest of the row: never delivered
                        self._undelivered += tokens - k
                        break
                    delay = time.perf_counter() - self._start - commit_s
                    delays.append(delay)
                    if measured:
                        self._histogram[int(round(delay * 1e6))] += 1
            for seq_id in left:
                self._settle(seq_id)
                if self._turns is not None:
                    self._turn_ended(seq_id, time.perf_counter() - self._start)
            with self._progress:
                self._processed += 1
                self._progress.notify_all()

    def _settle(self, request_id: int) -> None:
        delays = self._live.pop(request_id, None)
        if delays:
            self._p50[request_id] = float(np.median(delays))
            self._max[request_id] = max(delays)
