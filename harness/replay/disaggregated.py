"""The replay of a P/D deployment: one discrete-event loop on the virtual clock over every
instance (docs/disaggregation.md).

Each instance steps on its own clock and never waits for another, except through a
transfer. A request arrives; the prefill router picks an instance, whose `prompt` engine
prefills it and hands it off with its first token. The decode router picks a decode
instance, to which the sequence is added with its KV in transfer: the instance reserves its
blocks when its scheduler admits it (at the start of the instance's next step, or later
when it has no room: backpressure), and the transfer starts then. The KV moves over the two
devices' links (harness/replay/kv_links.py), ends no earlier than the prefill allows, and
arrives after the link's latency; from then on the decode instance decodes it. The user
sees the first token when the KV has arrived. The prefill instance's step log keeps the
request it handed off (its P/D columns filled in there as it moves) until the decode
instance's log takes it in, which writes its one row.

A session trace's turns (harness/replay/sessions.py) arrive as their parents end, a turn
ending with its last token on its decode instance (or where it is rejected); each engine
is told its turns' sessions (dp_assign session_affinity), and so is the prefill router.

Events at one instant go in a fixed order (arrivals, transfers ending, hand-offs and
arrivals of KV, then instance steps, the lower instance first), so a seed gives identical
tables. This loop is the reference; csrc/replay/pd_replay.hpp, its fast twin, is checked
against it (tests/test_native_replay_pd.py).
"""

from __future__ import annotations

import heapq
import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

import numpy as np

from engine import _core
from engine.device_memory import kv_bytes_per_token
from engine.disaggregation import Disaggregation

from .driver import PROGRESS_EVERY, Requests, engine_step_seconds
from .kv_links import Links

if TYPE_CHECKING:
    from engine.llm_engine import LLMEngine

HANDOFF, KV_ARRIVED = 0, 1  # event kinds, in their order at one instant


@dataclass
class Instance:
    """One instance: its engine, its step log, its clock (the start of its next step)."""

    role: str
    index: int
    engine: "LLMEngine"  # with a prompt or a completion scheduler
    log: _core.StepLog  # record(step, t_start, t_end), enqueue(added, t)
    clock: float = 0.0
    stalled: bool = False  # its last step ran no row: it waits for an event to step again
    # decode: sequences added with their KV in transfer, not yet admitted
    pending: Dict[int, "Handoff"] = field(default_factory=dict)

    @property
    def runnable(self) -> bool:
        return not self.stalled and self.engine.has_unfinished()

    def wake(self, t: float) -> None:
        self.clock = max(self.clock, t)
        self.stalled = False


@dataclass
class Handoff:
    """A prefilled sequence on its way to a decode instance."""

    seq_id: int
    prefill: Instance
    sender: tuple  # (prefill instance, DP rank)
    nbytes: float
    asked_s: float  # when the prefill asked for decode room
    prefill_end_s: float  # the end of the step that ran its last chunk
    not_before_s: float = 0.0  # the transfer ends no earlier (layerwise: its last layer)
    decode: Optional[Instance] = None  # set when the decode router picks one
    added: Optional[_core.SeqRecord] = None  # the decode scheduler's record of it as added


def replay_disaggregated(service: Disaggregation, instances: List[Instance],
                         requests: Requests, model_config,
                         on_arrival: Callable[[int, float], None],
                         on_step: Optional[Callable[[int, int], None]] = None,
                         stop: Optional[threading.Event] = None) -> bool:
    """Replay the requests to completion, or until `stop` is set. True if completed.
    `on_arrival(i, t)` is told each request's arrival (a closed loop's and a session
    trace's are not the trace's). A prefill instance's log keeps its hand-offs (StepLog
    handoff `kept`)."""
    run = _Service(service, instances, requests, model_config, on_arrival)
    stop = threading.Event() if stop is None else stop
    n = len(requests.arrival_s)
    while not stop.is_set():
        if not run.advance():
            break
        if on_step is not None and run.stepped and run.steps % PROGRESS_EVERY == 0:
            on_step(run.done, n)
    if on_step is not None:
        on_step(run.done, n)
    return not stop.is_set()


class _Service:
    def __init__(self, service: Disaggregation, instances: List[Instance], requests: Requests,
                 model_config, on_arrival) -> None:
        self.service, self.requests = service, requests
        self.on_arrival = on_arrival
        self.prefill = [i for i in instances if i.role == "prefill"]
        self.decode = [i for i in instances if i.role == "decode"]
        self.instances = instances
        p, d = service.prefill, service.decode
        pe = self.prefill[0].engine.config.scheduler
        self.prefill_router = _core.PrefillRouter(service.prefill_router, p.instances,
                                                  pe.dp_size * pe.num_kv_blocks, pe.block_size)
        self.decode_router = _core.DecodeRouter(service.decode_router, d.instances)
        self.kv_per_token = kv_bytes_per_token(model_config, p.deployment)
        self.layers = model_config.num_hidden_layers + model_config.num_nextn_predict_layers
        kv = service.kv_transfer
        sender, receiver = (pool[0].engine.device_profile for pool in (self.prefill, self.decode))
        assert sender is not None and receiver is not None  # a pool runs on a modeled device
        self.sender_bps = kv.bytes_per_s(sender) * p.deployment.attention_tp
        self.receiver_bps = kv.bytes_per_s(receiver) * d.deployment.attention_tp
        self.latency_s = kv.latency_us * 1e-6
        self.layerwise = kv.layerwise
        self.links = Links()
        self.events: list = []  # (time, kind, order, Handoff)
        self.handoffs: Dict[int, Handoff] = {}
        self.arrivals = np.ascontiguousarray(requests.arrival_s, np.float64)
        self.prompt_len = np.ascontiguousarray(requests.prompt_len, np.int64)
        self.max_new_tokens = np.ascontiguousarray(requests.max_new_tokens, np.int64)
        self.next = self.done = self.steps = self._order = 0
        self.now = 0.0
        self.stepped = False
        self.turns, self.session = _turns(requests, instances)

    def advance(self) -> bool:
        """The next event, processed; False when nothing is left to happen."""
        self.stepped = False
        t_arrival = self._next_arrival()
        t_link, key = self.links.next_end()
        t_event = self.events[0][0] if self.events else math.inf
        runnable = [i for i in self.instances if i.runnable]
        first = min(runnable, key=lambda i: i.clock) if runnable else None
        t_step = first.clock if first is not None else math.inf
        t = min(t_arrival, t_link, t_event, t_step)
        if t == math.inf:
            return False
        self.now = t
        if t_arrival == t:
            due = None if self.turns is None else self.turns.take_due(t)
            self._arrive(self.next if due is None else due[1], t)
        elif t_link == t:
            assert key is not None  # a finite end names its transfer
            self._transferred(key, t)
        elif t_event == t:
            _, kind, _, handoff = heapq.heappop(self.events)
            (self._route_decode if kind == HANDOFF else self._kv_arrived)(handoff, t)
        else:
            assert first is not None  # a finite step time names its instance
            self._step(first)
        return True

    def _next_arrival(self) -> float:
        if self.turns is not None:
            return self.turns.next_s()
        if self.next >= len(self.arrivals):
            return math.inf
        window = self.requests.concurrency
        if window:  # a closed loop: released when fewer than the window are in flight
            return self.now if self.next < self.done + window else math.inf
        return float(self.arrivals[self.next])

    def _push(self, t: float, kind: int, handoff: Handoff) -> None:
        heapq.heappush(self.events, (t, kind, self._order, handoff))
        self._order += 1

    def _arrive(self, i: int, t: float) -> None:
        self.next += 1
        self.on_arrival(i, t)
        r = self.requests
        prompt_len = int(self.prompt_len[i])
        ids = None if r.hash_ids is None else r.hash_ids[i]
        hashes = self.prefill_router.hashes(ids, r.hash_block_size, prompt_len)
        session = -1 if self.session is None else int(self.session[i])
        instance = self.prefill[self.prefill_router.route(prompt_len, hashes, session)]
        added = instance.engine.add_request(
            i, prompt_len=prompt_len, max_new_tokens=int(self.max_new_tokens[i]),
            arrival_time=t, hash_ids=ids, hash_block_size=r.hash_block_size)
        instance.log.enqueue(added, t)  # rejected here: the next step's plan says so
        if added.status != "waiting":
            self._ended(i, t)
        instance.wake(t)

    def _ended(self, i: int, t: float) -> None:
        """A session's turn i's last token is out, or it was rejected, at t."""
        session = -1 if self.turns is None else self.turns.ended(i, t)
        if session >= 0:
            for instance in self.instances:
                instance.engine.end_session(session)

    def _step(self, instance: Instance) -> None:
        t0 = instance.clock
        record = instance.engine.step()
        assert record is not None, "a P/D instance steps without overlap"
        t1 = t0 + engine_step_seconds(record)
        instance.clock = t1
        instance.stalled = not len(record.post.output_len)  # no row ran on any rank
        gone = record.post.left  # a list made on each read: read once
        # a pass that only admitted reservations ran nothing and took no time: not a step
        if not (instance.stalled and not gone and not len(record.preempted)):
            instance.log.record(record, t0, t1)
            self.steps += 1
            self.stepped = True
        if instance.role == "prefill":
            for left in gone:
                self.prefill_router.prefilled(instance.index, int(self.prompt_len[left.seq_id]))
                if left.status == "rejected":
                    self.done += 1
                    self._ended(left.seq_id, t1)
                else:
                    self._handed_off(instance, left, t0, t1)
            return
        self.done += len(gone)
        for left in gone:
            self._ended(left.seq_id, t1)
        for seq_id in [s for s in instance.pending
                       if instance.engine.scheduler.seq(s).status == "running"]:
            self._start_transfer(instance.pending.pop(seq_id), t0)

    def _handed_off(self, instance: Instance, left, t0: float, t1: float) -> None:
        """The prefill of `left` ended in the step [t0, t1]: it asks for decode room when
        its KV can start to move (the last chunk's first layer done, layerwise; else the
        step's end)."""
        nbytes = int(self.prompt_len[left.seq_id]) * self.kv_per_token
        instance.log.set_handed(left.seq_id, kv_bytes=nbytes, handoff_s=t1)
        asked = t0 + (t1 - t0) / self.layers if self.layerwise else t1
        self._push(asked, HANDOFF, Handoff(left.seq_id, instance, (instance.index, left.dp_rank),
                                           nbytes, asked, t1))

    def _room(self, decode: Instance) -> int:
        """A decode instance's free KV blocks, less those its sequences not yet admitted
        will take (least_kv's measure)."""
        config = decode.engine.config.scheduler
        free = sum(decode.engine.scheduler.num_free_blocks(r) for r in range(config.dp_size))
        return free - _core.awaited_blocks([int(self.prompt_len[s]) for s in decode.pending],
                                           config.block_size)

    def _route_decode(self, h: Handoff, t: float) -> None:
        free = [self._room(i) for i in self.decode] \
            if self.service.decode_router == "least_kv" else ()
        instance = self.decode[self.decode_router.route(free)]
        h.prefill.log.set_handed(h.seq_id, decode_instance=instance.index)
        added = instance.engine.add_request(
            h.seq_id, prompt_len=int(self.prompt_len[h.seq_id]),
            max_new_tokens=int(self.max_new_tokens[h.seq_id]), arrival_time=t,
            kv_transfer=True)
        h.decode, h.added = instance, added
        if added.status != "waiting":  # rejected, or done on arrival: one token, sampled at
            # the end of its prefill step (layerwise, it asked for room before), no KV moved
            at = max(t, h.prefill_end_s) if added.status == "finished" else t
            instance.log.enqueue(added, at, h.prefill.log)
            self.done += 1
            self._ended(h.seq_id, at)
            return
        instance.pending[h.seq_id] = h
        instance.wake(t)

    def _start_transfer(self, h: Handoff, t: float) -> None:
        assert h.decode is not None and h.added is not None  # the decode router's
        h.prefill.log.set_handed(h.seq_id, transfer_start_s=t, decode_wait_s=t - h.asked_s)
        receiver = (h.decode.index, h.added.dp_rank)
        self.handoffs[h.seq_id] = h
        rate = self.links.start(h.seq_id, ("prefill",) + h.sender, ("decode",) + receiver,
                                h.nbytes, self.sender_bps, self.receiver_bps, t)
        # layerwise, the last layer moves after the prefill step, at the share it starts at
        h.not_before_s = h.prefill_end_s + (h.nbytes / self.layers / rate if self.layerwise
                                            else 0.0)

    def _transferred(self, key: int, t: float) -> None:
        self.links.finish(key, t)
        h = self.handoffs.pop(key)
        self._push(max(t, h.not_before_s) + self.latency_s, KV_ARRIVED, h)

    def _kv_arrived(self, h: Handoff, t: float) -> None:
        h.prefill.log.set_handed(h.seq_id, transfer_end_s=t)
        instance, added = h.decode, h.added
        assert instance is not None and added is not None  # its transfer started
        instance.engine.kv_arrived(h.seq_id)
        instance.log.enqueue(added, t, h.prefill.log)
        instance.wake(t)


def _turns(requests: Requests, instances: List[Instance]):
    """(a session trace's turns as they are released, each row's session); (None, None)
    for a request trace. Each engine is told the sessions."""
    s = requests.sessions
    if s is None:
        return None, None
    for instance in instances:
        instance.engine.sessions = s.session_id
    return _core.SessionTurns((s.parent, s.gap_s, s.subagent, s.session_id, s.live),
                              requests.arrival_s), s.session_id
