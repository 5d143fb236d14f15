"""LLMEngine: requests in, one engine iteration per step(), a StepRecord out per step.

One iteration: schedule -> metadata -> Worker forward -> sample -> postprocess -> log_stats.
With overlap the order is schedule(i) -> launch forward(i) -> postprocess(i-1) ->
sample(i): forward and sampling run on a worker thread (torch releases the GIL inside its
ops), so the CPU schedules and post-processes while the previous forward runs.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

from . import _core
from .config import EngineConfig

DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
PRECISION_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
from .devices import detect_device, load_device_profile
from .executors import ExecutorOutput, ModeledExecutor, TorchExecutor
from .flops import FlopsEstimator
from .model_config import load_model_config


@dataclass(slots=True)
class StepRecord:
    """One engine step as the harness records it (arrays are views of the plan's buffers)."""

    step: int
    phase: str
    batches: list  # one plan batch per DP rank: seq_ids, seqlen_q, seqlen_k, kind, ...
    preempted: np.ndarray
    rejected: np.ndarray
    finished: np.ndarray
    discarded_tokens: int
    accepted: list  # MTP drafts accepted per row, one array per DP rank
    start_ns: int  # perf_counter_ns when the step's schedule() was called
    sched_cpp_ns: int  # inside C++
    sched_call_ns: int  # the call as Python sees it, GIL reacquire included
    forward_ns: int
    sample_ns: int
    postprocess_ns: int
    step_ns: int  # schedule() start to postprocess() end
    model_flops: np.ndarray  # per DP rank
    executed_flops: np.ndarray
    bytes: np.ndarray
    modeled: bool  # forward and sample durations come from a device model


@dataclass
class _Launched:
    plan: object
    start_ns: int
    sched_call_ns: int
    output: Future


class LLMEngine:
    def __init__(self, config: EngineConfig = EngineConfig()) -> None:
        self.config = config
        self.model_config = load_model_config(config.model)
        self.scheduler = _core.Scheduler(config.scheduler)
        # The estimator is for metrics only: it never picks batches. It counts weights and
        # KV at the bytes the run moves (the modeled executor times steps with it too).
        if config.executor.startswith("modeled:"):
            self.flops = FlopsEstimator(self.model_config, kv_bytes=2.0,  # BF16 KV
                                        weight_bytes=PRECISION_BYTES[config.precision])
            self.device = detect_device("cpu")  # the host; the modeled device is the profile
            self.executor = ModeledExecutor(config, self.flops,
                                            load_device_profile(config.executor[len("modeled:"):]))
        else:
            element = DTYPE_BYTES[config.dtype]
            self.flops = FlopsEstimator(self.model_config, weight_bytes=element, kv_bytes=element)
            self.device = detect_device(config.device)
            self.executor = TorchExecutor(config, self.model_config, self.device.torch_device)
        self._mtp = config.scheduler.num_mtp > 0  # the Worker runs MTP on every position
        self._prompt_rng = np.random.default_rng(config.seed)
        self._thread = ThreadPoolExecutor(1, "forward") if config.scheduler.overlap else None
        self._inflight: Optional[_Launched] = None

    def add_request(self, request_id: int, prompt_token_ids: Optional[Sequence[int]] = None,
                    prompt_len: Optional[int] = None, max_new_tokens: int = 16,
                    arrival_time: float = 0.0, hash_ids=None) -> None:
        """Queue a request; prompt ids are synthesised (seeded) when only a length is given."""
        if (prompt_token_ids is None) == (prompt_len is None):
            raise ValueError(f"request {request_id}: give exactly one of prompt_token_ids "
                             f"and prompt_len")
        if prompt_token_ids is None:
            if prompt_len < 1:
                raise ValueError(f"request {request_id}: prompt_len must be >= 1, got {prompt_len}")
            prompt_token_ids = self._prompt_rng.integers(
                0, self.model_config.vocab_size, prompt_len).tolist()
        self.scheduler.add_sequence(seq_id=request_id, prompt_len=len(prompt_token_ids),
                                    max_new_tokens=max_new_tokens, arrival_time=arrival_time,
                                    hash_ids=hash_ids)
        seq = self.scheduler.seq(request_id)
        if seq.status in ("waiting", "running"):
            tokens = list(prompt_token_ids)
            if self.config.scheduler.engine_type == "completion":  # arrives with its first token
                tokens.append(int(self._prompt_rng.integers(0, self.model_config.vocab_size)))
            self.executor.add(seq.dp_rank, request_id, tokens)

    def has_unfinished(self) -> bool:
        return not self.scheduler.is_finished() or self._inflight is not None

    def step(self, phase: Optional[str] = None) -> Optional[StepRecord]:
        """One iteration. Returns the record of the step post-processed in it (with overlap,
        the previous one; None on the first overlapped iteration). `phase` is the round a DP
        vote across processes agreed on (engine/dp.py)."""
        if self._thread is None:
            launched = self._schedule(phase)
            return self._finish(launched, launched.output.result())
        launched = self._schedule(phase) if not self.scheduler.is_finished() or phase else None
        record = self.drain()
        self._inflight = launched
        return record

    def drain(self) -> Optional[StepRecord]:
        """Post-process the plan still in flight (overlap), if any."""
        previous, self._inflight = self._inflight, None
        return None if previous is None else self._finish(previous, previous.output.result())

    def run(self) -> List[StepRecord]:
        records = []
        while self.has_unfinished():
            record = self.step()
            if record is not None:
                records.append(record)
        return records

    def tokens(self, request_id: int) -> List[int]:
        """Prompt plus generated token ids of a live request."""
        return self.executor.tokens(self.scheduler.seq(request_id).dp_rank, request_id)

    def _schedule(self, phase: Optional[str]) -> _Launched:
        start = time.perf_counter_ns()
        plan = self.scheduler.schedule(release_gil=self.config.release_gil, phase=phase)
        called = time.perf_counter_ns() - start
        if self._thread is None:
            output: Future = Future()
            output.set_result(self.executor.execute(plan))
        else:
            output = self._thread.submit(self.executor.execute, plan)
        return _Launched(plan, start, called, output)

    def _finish(self, launched: _Launched, out: ExecutorOutput) -> StepRecord:
        plan = launched.plan
        start = time.perf_counter_ns()
        result = self.scheduler.postprocess(plan, out.accepted)
        postprocess_ns = time.perf_counter_ns() - start
        done = [(self.scheduler.seq(i).dp_rank, i)
                for i in np.concatenate((result.finished, plan.rejected)).tolist()]
        if self._thread is None:
            self._drop(done)
        else:  # the forward in flight may still hold (discarded) work of these sequences
            self._thread.submit(self._drop, done)
        return self._log_stats(launched, out, result, postprocess_ns)

    def _drop(self, done) -> None:
        for rank, seq_id in done:
            self.executor.drop(rank, seq_id)

    def _log_stats(self, launched, out, result, postprocess_ns) -> StepRecord:
        plan = launched.plan
        batches = plan.batches
        model_flops, executed_flops, moved = (np.zeros(len(batches)) for _ in range(3))
        for r, (batch, accepted) in enumerate(zip(batches, out.accepted)):  # a device each
            if not len(batch.seq_ids):
                continue
            f = out.flops[r] if out.flops is not None else self.flops.calc_flops(
                batch.seqlen_q, batch.seqlen_k, kind=batch.kind, padded_q=batch.padded_q,
                accepted=accepted, mtp_q=batch.seqlen_q if self._mtp else None)
            model_flops[r], executed_flops[r], moved[r] = f.model_flops, f.executed_flops, f.bytes
        return StepRecord(
            step=plan.step, phase=plan.phase, batches=batches, preempted=plan.preempted,
            rejected=plan.rejected, finished=result.finished,
            discarded_tokens=result.discarded_tokens, accepted=out.accepted,
            start_ns=launched.start_ns,
            sched_cpp_ns=plan.sched_ns, sched_call_ns=launched.sched_call_ns,
            forward_ns=out.forward_ns, sample_ns=out.sample_ns, postprocess_ns=postprocess_ns,
            step_ns=time.perf_counter_ns() - launched.start_ns,
            model_flops=model_flops, executed_flops=executed_flops, bytes=moved,
            modeled=out.modeled)
