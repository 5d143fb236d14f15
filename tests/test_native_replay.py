"""The C++ replay loop against the Python one (docs/architecture.md, "Two replay loops"):
the same requests through the same modeled engine record the same rows, host timings
aside, whatever the scheduler's configuration, a session trace's turns arriving alike; and
its MTP draws are numpy's stream."""

import threading
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from engine import EngineConfig, LLMEngine, SchedulerConfig, _core
from engine.deployment import Deployment
from engine.plan import KIND_DECODE
from harness.analysis.exact import HOST_COLUMNS
from harness.replay.driver import Requests, replay
from harness.replay.native import replay_native
from harness.replay.sessions import SessionTree

pytestmark = pytest.mark.core

ENGINE_TYPES = ("normal", "prompt", "completion")


class LogRecorder:
    """What a replay loop needs of a Recorder, over a bare StepLog: the chunks kept."""

    def __init__(self, requests: Requests, chunk_steps: int) -> None:
        self.log = _core.StepLog(0, chunk_steps, self.flush)
        self.enqueue, self.step = self.log.enqueue, self.log.record
        self.arrival_s = requests.arrival_s.copy()
        self.chunks = []

    @property
    def num_done(self) -> int:
        return self.log.num_done

    def arrived(self, i: int, t: float) -> None:
        self.arrival_s[i] = t

    def flush(self) -> None:
        self.chunks.append((self.log.take_steps(), self.log.take_batches(),
                            self.log.take_requests()))

    def tables(self):
        self.log.end()
        self.flush()
        out = []
        for k in range(3):
            frames = [pd.DataFrame(chunk[k]) for chunk in self.chunks]
            frame = pd.concat(frames, ignore_index=True)
            out.append(frame.drop(columns=[c for c in frame if c in HOST_COLUMNS]))
        out[2] = out[2].sort_values("request_id", ignore_index=True)
        return out


def replayed(config: EngineConfig, requests: Requests, loop: str, chunk_steps: int = 7,
             stop=None):
    engine = LLMEngine(config)
    recorder = LogRecorder(requests, chunk_steps)
    progress = []
    on_step = lambda done, n: progress.append(done)  # noqa: E731
    if loop == "python":
        completed = replay(engine, requests, "virtual", recorder, on_step, stop=stop)
    else:
        completed = replay_native(engine, requests, recorder, on_step, stop=stop)
    engine.close()
    return completed, recorder.tables(), recorder.arrival_s, progress


@st.composite
def workloads(draw):
    """(EngineConfig, Requests): a modeled engine with or without a deployment, and
    requests that arrive over time (or in a closed loop), share prefixes, overflow the KV
    pool (preemptions) or can never fit it (rejections)."""
    dp = draw(st.integers(1, 3))
    num_mtp = draw(st.integers(0, 2))
    sched = dict(engine_type=draw(st.sampled_from(ENGINE_TYPES)), dp_size=dp,
                 num_mtp=num_mtp, overlap=draw(st.booleans()),
                 block_size=draw(st.sampled_from((4, 16))),
                 max_num_batched_tokens=draw(st.integers(16, 256)),
                 max_num_seqs=draw(st.integers(1, 8)),
                 prefix_caching=draw(st.booleans()),
                 num_kv_blocks=draw(st.integers(8, 80)))
    sched["mixed_batches"] = sched["engine_type"] == "normal" and draw(st.booleans())
    deployment = Deployment(devices=dp, attention_dp=dp, moe_ep=dp,
                            micro_batches=draw(st.sampled_from((1, 2)))) \
        if draw(st.booleans()) else None
    config = EngineConfig(scheduler=SchedulerConfig(**sched), model="deepseek-v3",
                          executor="modeled:H200", precision="fp8", deployment=deployment,
                          mtp_acceptance=draw(st.floats(0.1, 0.9)), seed=draw(st.integers(0, 99)))
    n = draw(st.integers(1, 24))
    gaps = draw(st.lists(st.floats(0, 0.05), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 600), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    hashes = None
    if sched["prefix_caching"]:
        prefix = st.lists(st.integers(0, 3), max_size=6)
        hashes = np.empty(n, object)
        hashes[:] = [draw(prefix)[:p // 16] for p in prompts]
    concurrency = draw(st.none() | st.integers(1, 6))
    return config, Requests(np.cumsum(gaps), np.array(prompts, np.int64),
                            np.array(outputs, np.int64), hashes, 16 if hashes is not None else None,
                            concurrency)


@st.composite
def session_workloads(draw):
    """workloads() whose requests are a session trace's turns: each row's parent an earlier
    row or none (a root, starting a session), a sub-agent's first turn or its parent's one
    next turn, after a gap; open, or a closed loop of live sessions; DP ranks assigned by
    session or not."""
    config, requests = draw(workloads())
    n = len(requests.arrival_s)
    parent, subagent, session, followed = [], [], [], set()
    for i in range(n):
        p = draw(st.integers(-1, i - 1)) if i else -1
        sub = p >= 0 and (p in followed or draw(st.booleans()))
        if p >= 0 and not sub:
            followed.add(p)
        parent.append(p)
        subagent.append(sub)
        session.append(session[p] if p >= 0 else i)
    gaps = draw(st.lists(st.floats(0, 0.05), min_size=n, max_size=n))
    tree = SessionTree(np.array(parent, np.int64), np.array(gaps), np.array(subagent),
                       np.array(session, np.int64), draw(st.none() | st.integers(1, 3)))
    assign = draw(st.sampled_from(("round_robin", "session_affinity")))
    config = replace(config, scheduler=replace(config.scheduler, dp_assign=assign))
    return config, requests._replace(concurrency=None, sessions=tree)


@settings(max_examples=60, deadline=None)
@given(workload=workloads() | session_workloads())
def test_the_two_loops_record_the_same_rows(workload):
    config, requests = workload
    python = replayed(config, requests, "python")
    cpp = replayed(config, requests, "cpp")
    assert python[0] and cpp[0]
    for name, a, b in zip(("steps", "batches", "requests"), python[1], cpp[1]):
        pd.testing.assert_frame_equal(a, b, obj=name)
    np.testing.assert_array_equal(python[2], cpp[2])  # a closed loop's or turns' arrivals
    assert python[3] == cpp[3]  # progress: the same counts at the same steps


def test_a_stop_ends_the_loop_with_the_rows_recorded_whole():
    config = EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=4096, block_size=64),
                          model="deepseek-v3", executor="modeled:H200")
    requests = Requests(np.zeros(300), np.full(300, 100, np.int64), np.full(300, 50, np.int64))
    stop = threading.Event()
    stop.set()
    completed, (steps, batches, rows), _, progress = replayed(config, requests, "cpp", stop=stop)
    assert not completed
    assert 0 < steps["step"].nunique() <= 64  # stopped at the first progress report
    assert set(batches["step"]) <= set(steps["step"])
    assert (rows["status"] == 2).any()  # unfinished requests leave as rows at the end


def test_mtp_drafts_are_numpys_seeded_stream():
    """The modeled executor's accepted drafts, drawn in C++, equal numpy's draws from the
    same seed: leading drafts accepted, one uniform per draft of the widest row."""
    config = EngineConfig(scheduler=SchedulerConfig(num_kv_blocks=4096, block_size=64,
                                                    num_mtp=3, dp_size=2),
                          model="deepseek-v3", executor="modeled:H200", mtp_acceptance=0.6,
                          seed=7)
    engine = LLMEngine(config)
    rng = np.random.default_rng(7)
    for i in range(12):
        engine.add_request(i, prompt_len=20 + i, max_new_tokens=30)
    seen = 0
    while engine.has_unfinished():
        plan = engine.scheduler.schedule()
        _, _, accepted = engine.executor.core.execute(plan)
        for batch, got in zip(plan.batches, accepted):
            drafts = np.where(batch.kind == KIND_DECODE, batch.seqlen_q.astype(np.int64) - 1, 0)
            expected = np.zeros(len(drafts), np.int64)
            if drafts.any():
                hits = rng.random((len(drafts), int(drafts.max()))) < 0.6
                expected = np.minimum(np.cumprod(hits, axis=1).sum(axis=1), drafts)
                seen += int(drafts.sum())
            np.testing.assert_array_equal(got, expected)
        engine.scheduler.postprocess(plan, accepted)
    assert seen > 100


def test_bad_arrays_are_refused_by_name():
    engine = LLMEngine(EngineConfig(executor="modeled:H200", model="deepseek-v3"))
    log = _core.StepLog(0, 8, lambda: None)
    with pytest.raises(ValueError, match="one value a request"):
        _core.replay_virtual(engine.scheduler, engine.executor.core, log, np.zeros(2),
                             np.ones(3, np.int64), np.ones(2, np.int64),
                             on_progress=lambda d, n: True)
    with pytest.raises(ValueError, match="closed loop"):
        _core.replay_virtual(engine.scheduler, engine.executor.core, log, np.zeros(2),
                             np.ones(2, np.int64), np.ones(2, np.int64), concurrency=1,
                             on_progress=lambda d, n: True)
