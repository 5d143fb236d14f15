"""The served run's loop (harness/replay/loop.py's Loop): the engine's thread takes the
requests the HTTP thread received (server.py), steps the engine, records every step and
request as a replay does, and hands each request its committed tokens after every step.

A modeled device's step is paced to the wall clock: the thread waits out the step's
modeled time before it hands the tokens over. Request ids are 0, 1, ... in the order the
requests arrived (the requests table's request_id)."""

from __future__ import annotations

import queue
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np

from ..record.recorder import Recorder
from ..replay.driver import IDLE_POLL_S
from ..replay.frontend import Frontend
from .server import Event, Pending, Server

STOPPED = ("unfinished", "the server stopped")


class ServedRecorder(Recorder):
    """A recorder whose requests are known as they arrive (Recorder.admit)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.serving()


class ServeLoop:
    """One engine in this process, on the wall clock, its requests from the server."""

    recorder_type: Type[Recorder] = ServedRecorder
    uncalibrated: Optional[str] = "off: a served run's harness cost is not calibrated"
    frontend: Optional[Frontend] = None  # the server is this run's frontend

    def __init__(self, engine, server: Server) -> None:
        self.instances: Sequence[Tuple[str, int, Any]] = [("colocated", 0, engine)]
        self.server = server
        self.served: Dict[str, Any] = dict(url=server.url, model=server.model, requests=0,
                                           max_concurrency=server.max_concurrency,
                                           max_requests=server.max_requests)
        self._pending: Dict[int, Pending] = {}
        self._sent: Dict[int, int] = {}  # request id -> its tokens handed over
        self._next = 0
        blocks = engine.config.scheduler
        self._kv_blocks = blocks.num_kv_blocks * blocks.dp_size

    def manifest(self) -> Dict[str, Any]:
        # the dict itself: the request count is filled in as the run goes
        return dict(trace="served", served=self.served)

    def output_tokens(self) -> Dict[int, List[int]]:
        return self.instances[0][2].output_tokens()

    def run(self, requests, recorder, progress, stop, start) -> bool:
        """Until `stop` is set (a signal): a server's run ends only so, and is complete."""
        engine = self.instances[0][2]
        while not stop.is_set():
            self._take(engine, recorder, start)
            if not engine.has_unfinished():
                continue
            step_start = time.perf_counter()
            record = engine.step()
            if record is None:  # overlap: the first step is still in flight
                continue
            if record.modeled:  # paced: the step takes its modeled time on the wall clock
                stop.wait(max(0.0, step_start + record.forward_ns / 1e9 - time.perf_counter()))
            now = time.perf_counter()
            self._publish(record, now, now - step_start)
            recorder.step(record, step_start - start, now - start)
        return True

    def close(self) -> None:
        """No request taken from now on; every one in the engine, or received and not
        taken, told it did not finish; the server stopped."""
        self.server.refuse()
        left = list(self._pending.values())
        self._pending.clear()
        while True:
            try:
                left.append(self.server.incoming.get_nowait())
            except queue.Empty:
                break
        if left:
            self.server.deliver([(p, (0, STOPPED, time.perf_counter())) for p in left], None)
        self.server.close()
        self.instances[0][2].close()

    def _take(self, engine, recorder, start: float) -> None:
        """Add what the server received; an idle engine waits (IDLE_POLL_S at most)."""
        incoming = self.server.incoming
        busy = engine.has_unfinished()
        while True:
            try:
                pending = incoming.get_nowait() if busy else incoming.get(timeout=IDLE_POLL_S)
            except queue.Empty:
                return
            busy = True
            self._add(engine, recorder, pending, time.perf_counter() - start)

    def _add(self, engine, recorder, pending: Pending, t: float) -> None:
        i, request = self._next, pending.request
        self._next += 1
        self.served["requests"] = self._next
        recorder.admit(i, t, request.prompt_len, request.max_tokens)
        added = engine.add_request(
            i, prompt_token_ids=request.prompt_ids, max_new_tokens=request.max_tokens,
            arrival_time=t)
        recorder.enqueue(added, t)
        self._pending[i], self._sent[i] = pending, 0
        if added.status != "waiting":  # rejected as it came
            self.server.deliver([(pending, (0, (added.status, added.reason),
                                            time.perf_counter()))], None)
            self._forget(i)

    def _publish(self, record, now: float, seconds: float) -> None:
        ids = np.concatenate([b.seq_ids for b in record.batches]).tolist()
        events: List[Tuple[Pending, Event]] = []
        news: Dict[int, int] = {}
        for seq_id, total in zip(ids, record.post.output_len.tolist()):
            if seq_id in self._sent and total > self._sent[seq_id]:
                news[seq_id] = total - self._sent[seq_id]
                self._sent[seq_id] = total
        ended = {r.seq_id: (r.status, r.reason) for r in record.post.left}
        queried = hit = 0  # the finished requests' prompts, and their prefix cache hits
        for r in record.post.left:
            if r.status == "finished" and r.seq_id in self._pending:
                prompt = self._pending[r.seq_id].request.prompt_len
                queried += prompt  # a readmitted request counts its hits again: capped
                hit += min(max(0, r.prefix_hit_tokens), prompt)
        for seq_id in news.keys() | ended.keys():
            pending = self._pending.get(seq_id)
            if pending is not None:
                events.append((pending, (news.get(seq_id, 0), ended.get(seq_id), now)))
        for seq_id in ended:
            self._forget(seq_id)
        batches = record.batches
        free = sum(b.kv_blocks_free for b in batches)
        step = (int(sum(int(b.seqlen_q.sum()) for b in batches)), seconds,
                sum(b.num_running for b in batches), sum(b.num_waiting for b in batches),
                1.0 - free / self._kv_blocks if self._kv_blocks else 0.0, queried, hit)
        self.server.deliver(events, step)

    def _forget(self, seq_id: int) -> None:
        self._pending.pop(seq_id, None)
        self._sent.pop(seq_id, None)
