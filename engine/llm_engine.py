"""LLMEngine: requests in, one engine iteration per step(), a StepRecord out per step.

Its calls: add_request, kv_arrived (a P/D decode's KV in place), step, run.

One iteration: schedule -> metadata -> Worker forward -> sample -> postprocess -> cost.
With overlap the order is schedule(i) -> launch forward(i) -> postprocess(i-1) ->
sample(i): forward and sampling run on a worker thread (torch releases the GIL inside its
ops), so the CPU schedules and post-processes while the previous forward runs.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence

import numpy as np

from . import _core
from .block_hashes import content_hash_ids
from .config import EngineConfig
from .executors import ExecutorOutput, ExecutorSpec
from .executors.base import RankCosts
from .model_config import load_model_config
from .plan import BatchContract, PlanContract, PostprocessContract


@dataclass(slots=True)
class StepRecord:
    """One engine step as the harness records it (arrays are views of the plan's buffers)."""

    plan: PlanContract  # the C++ scheduler's (the recorder's StepLog reads only those)
    post: PostprocessContract  # the plan's
    # MTP drafts accepted per row, an array per DP rank; None: none
    accepted: Optional[List[np.ndarray]]
    times: _core.StepTimes  # what the engine measured around the step, read by the C++ log
    # per DP rank: a StepCost (model_flops, executed_flops, bytes; a measured forward's
    # parts, engine/step_parts.py)
    flops: RankCosts
    modeled: bool  # forward and sample durations come from a device model

    @property
    def start_ns(self) -> int:  # perf_counter_ns when the step's schedule() was called
        return self.times.start_ns

    @property
    def sched_call_ns(self) -> int:  # the call as Python sees it, GIL reacquire included
        return self.times.sched_call_ns

    @property
    def forward_ns(self) -> int:
        return self.times.forward_ns

    @property
    def sample_ns(self) -> int:
        return self.times.sample_ns

    @property
    def postprocess_ns(self) -> int:
        return self.times.postprocess_ns

    @property
    def step_ns(self) -> int:  # schedule() start to postprocess() end
        return self.times.step_ns

    @property
    def step(self) -> int:
        return self.plan.step

    @property
    def phase(self) -> str:
        return self.plan.phase

    @property
    def sched_cpp_ns(self) -> int:  # inside C++
        return self.plan.sched_ns

    @property
    def batches(self) -> Sequence[BatchContract]:  # one plan batch per DP rank
        return self.plan.batches

    @property
    def preempted(self) -> np.ndarray:
        return self.plan.preempted

    @property
    def rejected(self) -> np.ndarray:
        return self.plan.rejected

    @property
    def finished(self) -> np.ndarray:
        return self.post.finished

    @property
    def discarded_tokens(self) -> int:
        return self.post.discarded_tokens

    @property
    def model_flops(self) -> np.ndarray:  # per DP rank
        return np.array([f.model_flops for f in self.flops])

    @property
    def executed_flops(self) -> np.ndarray:
        return np.array([f.executed_flops for f in self.flops])

    @property
    def bytes(self) -> np.ndarray:
        return np.array([f.bytes for f in self.flops])


@dataclass(slots=True)
class _Launched:
    plan: _core.Plan
    start_ns: int
    sched_call_ns: int
    output: Future[ExecutorOutput]


class LLMEngine:
    def __init__(self, config: EngineConfig = EngineConfig()) -> None:
        self.model_config = load_model_config(config.model)
        # The estimator is for metrics only: it never picks batches. It counts weights and
        # KV at the bytes the run moves (the modeled executor times steps with it too).
        # device_profile: that of the device the steps run on, where one is known (modeled).
        # The executor comes first: on a real accelerator it sizes the pool (kv_pool) with
        # the model resident, and the scheduler is built with that pool.
        self.executor, self.estimator, self.device, self.device_profile, self.kv_pool = \
            ExecutorSpec.parse(config.executor).build(config, self.model_config)
        if config.scheduler.host_kv_blocks and self.executor.holds_requests:
            raise ValueError("host_kv_blocks is modeled only: this executor holds real KV, "
                             "which no host tier backs")
        if self.kv_pool is not None:
            config = replace(config, scheduler=replace(
                config.scheduler, num_kv_blocks=self.kv_pool.num_kv_blocks))
        self.config = config
        # A request the scheduler finished or rejected is released at once (its slot
        # reused): the recorder and the executor keep what they need of it.
        self.scheduler = _core.Scheduler(config.scheduler, retain_finished=False)
        self._mtp = config.scheduler.num_mtp > 0  # the Worker runs MTP on every position
        self._cost = self.estimator.cost_model()
        self._release_gil = config.release_gil
        self._release_gil_postprocess = config.release_gil_postprocess
        self._prompt_rng = np.random.default_rng(config.seed)
        self._thread = ThreadPoolExecutor(1, "forward") if config.scheduler.overlap else None
        self._inflight: Optional[_Launched] = None
        # by request id, its session (-1: none): a session trace's replay sets it
        self.sessions: Optional[np.ndarray] = None

    def add_request(self, request_id: int, prompt_token_ids: Optional[Sequence[int]] = None,
                    prompt_len: Optional[int] = None, max_new_tokens: int = 16,
                    arrival_time: float = 0.0, hash_ids=None,
                    hash_block_size: Optional[int] = None,
                    kv_transfer: bool = False,
                    first_token: Optional[int] = None) -> _core.SeqRecord:
        """Queue a request; prompt ids are synthesised (seeded) when only a length is given.
        kv_transfer (completion engine): its KV is still in transfer; it decodes once
        kv_arrived(request_id) is called (docs/scheduling.md, "KV in transfer").
        first_token (completion engine): the token its prefill sampled (else a seeded
        draw). Prompt ids without hash ids are keyed for prefix caching by their own
        blocks' contents (block_hashes.content_hash_ids). Its session, if `sessions` names
        one, goes to the scheduler (dp_assign session_affinity keeps a session on one DP
        rank). Returns the scheduler's record of it as added (waiting, finished or
        rejected)."""
        if (prompt_token_ids is None) == (prompt_len is None):
            raise ValueError(f"request {request_id}: give exactly one of prompt_token_ids "
                             f"and prompt_len")
        if prompt_token_ids is not None:
            prompt_len = len(prompt_token_ids)
            if hash_ids is None and self.config.scheduler.prefix_caching:
                hash_block_size = self.config.scheduler.block_size
                hash_ids = content_hash_ids(prompt_token_ids, hash_block_size)
        else:
            assert prompt_len is not None  # exactly one of the two is given
            if prompt_len < 1:
                raise ValueError(f"request {request_id}: prompt_len must be >= 1, got "
                                 f"{prompt_len}")
        added = self.scheduler.add_sequence(seq_id=request_id, prompt_len=prompt_len,
                                            max_new_tokens=max_new_tokens,
                                            arrival_time=arrival_time, hash_ids=hash_ids,
                                            hash_block_size=hash_block_size,
                                            kv_transfer=kv_transfer,
                                            session_id=-1 if self.sessions is None
                                            else int(self.sessions[request_id]))
        if not self.executor.holds_requests:  # only lengths matter: no token ids
            return added
        if added.status == "waiting":
            vocab = self.model_config.vocab_size
            # greedy: a request's prompt is its own (seed, id)'s, whichever engine or rank
            # takes it and in whatever order
            rng = np.random.default_rng((self.config.seed, request_id)) \
                if self.config.sampling == "greedy" else self._prompt_rng
            tokens = list(prompt_token_ids) if prompt_token_ids is not None \
                else rng.integers(0, vocab, prompt_len).tolist()
            if self.config.scheduler.engine_type == "completion":  # arrives with its first token
                tokens.append(int(rng.integers(0, vocab)) if first_token is None
                              else first_token)
            self.executor.add(added.dp_rank, request_id, tokens)
        return added

    def kv_arrived(self, request_id: int) -> None:
        """The request's KV transfer ended: it decodes from the next step."""
        self.scheduler.kv_arrived(request_id)

    def end_session(self, session_id: int) -> None:
        """No turn of the session will come any more (session_retention lets its blocks
        go)."""
        self.scheduler.end_session(session_id)

    @property
    def peak_tflops(self) -> Optional[float]:
        """The dense peak TFLOP/s at the run's precision of the device the steps run on,
        where its profile is known (the modeled executor refuses an unpublished one)."""
        if self.device_profile is None:
            return None
        return self.device_profile.peak(self.config.precision)

    def has_unfinished(self) -> bool:
        return not self.scheduler.is_finished() or self._inflight is not None

    def step(self, phase: Optional[str] = None, join: bool = False) -> Optional[StepRecord]:
        """One iteration. Returns the record of the step post-processed in it (with overlap,
        the previous one; None on the first overlapped iteration). `phase` is the round a DP
        vote across processes agreed on (engine/dp.py); with it, or `join` (a mixed-batches
        DP rank, which holds no vote), a rank with nothing left still schedules a step, an
        empty one, to join the other ranks'."""
        if self._thread is None:
            start = time.perf_counter_ns()
            plan = self.scheduler.schedule(release_gil=self._release_gil, phase=phase)
            called = time.perf_counter_ns() - start
            return self._finish(plan, start, called, self.executor.execute(plan))
        launched = self._schedule(phase) \
            if not self.scheduler.is_finished() or phase or join else None
        record = self.drain()
        self._inflight = launched
        return record

    def drain(self) -> Optional[StepRecord]:
        """Post-process the plan still in flight (overlap), if any."""
        previous, self._inflight = self._inflight, None
        if previous is None:
            return None
        return self._finish(previous.plan, previous.start_ns, previous.sched_call_ns,
                            previous.output.result())

    def run(self) -> List[StepRecord]:
        records = []
        while self.has_unfinished():
            record = self.step()
            if record is not None:
                records.append(record)
        return records

    def close(self) -> None:
        """Stop the overlap thread (after the forward in flight, if any)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)

    def tokens(self, request_id: int) -> List[int]:
        """Prompt plus generated token ids of a live request."""
        if not self.executor.holds_requests:
            raise ValueError(f"the {self.config.executor} executor generates no tokens")
        return self.executor.tokens(self.scheduler.seq(request_id).dp_rank, request_id)

    def output_tokens(self) -> Dict[int, List[int]]:
        """Output token ids by request: every request's so far, a finished one's kept with
        config.keep_tokens."""
        if not self.executor.holds_requests:
            raise ValueError(f"the {self.config.executor} executor generates no tokens")
        return self.executor.output_tokens()

    def _schedule(self, phase: Optional[str]) -> _Launched:
        start = time.perf_counter_ns()
        plan = self.scheduler.schedule(release_gil=self._release_gil, phase=phase)
        called = time.perf_counter_ns() - start
        assert self._thread is not None, "a plan is launched ahead only with overlap"
        return _Launched(plan, start, called, self._thread.submit(self.executor.execute, plan))

    def _finish(self, plan: _core.Plan, start_ns: int, sched_call_ns: int,
                out: ExecutorOutput) -> StepRecord:
        start = time.perf_counter_ns()
        post = self.scheduler.postprocess(plan, out.accepted if self._mtp else None,
                                          release_gil=self._release_gil_postprocess)
        postprocess_ns = time.perf_counter_ns() - start
        if self.executor.holds_requests and (len(post.finished) or len(plan.rejected)):
            done = np.concatenate((post.finished, plan.rejected)).tolist()
            if self._thread is None:
                self._drop(done)
            else:  # the forward in flight may still hold (discarded) work of these sequences
                self._thread.submit(self._drop, done)
        flops = out.flops if out.flops is not None else self._flops(plan, out.accepted)
        if out.parts is not None and not out.modeled:  # measured: the steps table's parts
            flops = [c.with_parts(**{f"{k}_s": ns * 1e-9 for k, ns in p.items()})
                     for c, p in zip(flops, out.parts)]
        times = _core.StepTimes.of(start_ns, sched_call_ns, out.forward_ns, out.sample_ns,
                                postprocess_ns, time.perf_counter_ns() - start_ns)
        return StepRecord(plan=plan, post=post, accepted=out.accepted, times=times, flops=flops,
                          modeled=out.modeled)

    def _drop(self, done) -> None:
        assert self.executor.holds_requests, "called only for an executor that holds requests"
        for seq_id in done:
            self.executor.drop(seq_id)

    def _flops(self, plan: _core.Plan, accepted) -> List[_core.StepCost]:
        """A StepCost per rank: a device each."""
        batches = plan.batches
        return [self._cost.batch(b, a, self._mtp)
                for b, a in zip(batches, accepted or [None] * len(batches))]
