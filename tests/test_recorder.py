"""The recorder: chunked tables, the writer thread, and the C++ token accounting against a
Python recount.

The recount stamps each sampled row's 1 + accepted tokens at its step's end, keeps each
request's first output_len of them (as the add record and the postprocess results report
it) and stamps tokens a request arrived with at its enqueue time; the summary it gives
through metrics.summary must equal the one the recorder's per-request times and
inter-token histogram give through metrics.summarize.
"""

import contextlib
import dataclasses
import gc
import threading

import numpy as np
import pandas as pd
import pytest

from engine import EngineConfig, LLMEngine, ReferenceScheduler, Scheduler, SchedulerConfig, _core
from engine.plan import KIND_CHUNK
from harness.record import metrics, table_reader
from harness.record.recorder import REQUEST_COLUMNS, Recorder
from harness.record.table_sink import TableSink
from harness.replay.driver import Requests, replay
from harness.schema import TABLES
from harness.schema.values import STATUSES

pytestmark = pytest.mark.core

N = 40
HOST_TIMES = ["sched_cpp_ns", "sched_call_ns", "step_ns", "sample_ns", "postprocess_ns", "flush_ns"]


def trace(seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(dict(arrival_s=np.sort(rng.uniform(0, 0.2, N)),
                             prompt_len=rng.integers(1, 200, N), max_new_tokens=rng.integers(1, 30, N)))


def engine_config(num_kv_blocks=512, **sched):
    return EngineConfig(model="deepseek-v3", executor="modeled:H200", precision="fp8",
                        mtp_acceptance=0.6, scheduler=SchedulerConfig(
                            max_num_batched_tokens=256, max_num_seqs=16,
                            num_kv_blocks=num_kv_blocks, **sched))


def run(tmp_path, fmt="parquet", chunk_steps=1024, warmup=0, interrupt_after=None, stop=None,
        max_new_tokens=None, **sched):
    """A modeled replay of trace() with every StepRecord kept; returns what was recorded
    (`live`: the recorder's live requests before it closed)."""
    engine = LLMEngine(engine_config(**sched))
    out = tmp_path / f"{fmt}-{chunk_steps}-{warmup}-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    df = trace()
    if max_new_tokens is not None:
        df["max_new_tokens"] = max_new_tokens
    recorder = Recorder(engine, warmup, out, fmt, dict(run_id="r"), chunk_steps=chunk_steps,
                        trace=df)
    kept = []

    class Keeping:  # the recorder's face, keeping every record for the recount
        num_done = property(lambda self: recorder.num_done)

        def enqueue(self, added, t):
            kept.append(("enqueue", added, t))
            recorder.enqueue(added, t)

        def step(self, record, t0, t1):
            kept.append(("step", record, t1))
            recorder.step(record, t0, t1)
            if interrupt_after is not None and len(kept) > interrupt_after:
                raise KeyboardInterrupt

    try:
        replay(engine, Requests.of(df), "virtual", Keeping(), stop=stop and stop(engine))
    except KeyboardInterrupt:
        pass
    recorder.live = recorder.log.num_live
    recorder.close()
    return engine, recorder, df, kept, read(out, "steps", fmt), out


def stop_inside_step(after):
    """A stop event set inside engine.step() once `after` steps ran, as a signal would."""
    def install(engine):
        event, step, count = threading.Event(), engine.step, [0]

        def stepping(*args):
            count[0] += 1
            if count[0] > after:
                event.set()
            return step(*args)
        engine.step = stepping
        return event
    return install


def read(out, name, fmt="parquet"):
    path = out / f"{name}.{fmt}"
    return pd.read_parquet(path) if fmt == "parquet" else pd.read_csv(path)


def output_lens(df, kept):
    """Generated tokens per request, as the add records and postprocess results say."""
    out = np.zeros(len(df), np.int64)
    for kind, x, _ in kept:
        if kind == "enqueue":
            out[x.seq_id] = x.output_len
            continue
        ids = np.concatenate([b.seq_ids for b in x.batches])
        np.maximum.at(out, ids, x.post.output_len)
    return out


def recount(df, kept):
    """Token times in the CSR layout of metrics.per_request, the way the harness stamped
    them before the C++ recorder."""
    enqueued, tokens = {}, {i: [] for i in range(len(df))}
    for kind, x, t in kept:
        if kind == "enqueue":
            enqueued[x.seq_id] = t
            continue
        batches = x.batches
        for batch, accepted in zip(batches, x.accepted or [None] * len(batches)):
            sampled = batch.kind != KIND_CHUNK
            counts = 1 + (np.zeros(len(batch.kind), np.int64) if accepted is None else accepted)
            for seq_id, count in zip(batch.seq_ids[sampled], counts[sampled]):
                tokens[int(seq_id)] += [t] * int(count)
    output_len = output_lens(df, kept)
    times = []
    for i in range(len(df)):
        got = tokens[i][:output_len[i]]
        times += [enqueued.get(i)] * (output_len[i] - len(got)) + got
    return np.array(times, dtype=np.float64), np.concatenate(([0], np.cumsum(output_len)))


def read_requests(out, fmt="parquet"):
    return table_reader.read_requests(out / f"requests.{fmt}")


@pytest.mark.parametrize("sched", [dict(num_mtp=2), dict(num_mtp=1, overlap=True),
                                   dict(engine_type="completion"), dict()],
                         ids=["mtp", "mtp+overlap", "completion", "plain"])
@pytest.mark.parametrize("warmup", [0, 5])
def test_token_times_match_a_python_recount(tmp_path, sched, warmup):
    engine, recorder, df, kept, _, out = run(tmp_path, warmup=warmup, **sched)
    requests = read_requests(out).drop(columns=["run_id"])
    warm = recorder.warm
    times, offsets = recount(df, kept)
    want = metrics.per_request(requests.drop(columns=["first_token_s", "last_token_s"]),
                               times, offsets)
    pd.testing.assert_frame_equal(requests, want[requests.columns])
    got = metrics.summarize(requests, *recorder.itl(), warmup=warm)
    pd.testing.assert_frame_equal(got, metrics.summary(requests, times, offsets, warmup=warm),
                                  rtol=1e-12)
    assert (requests["status"] == "finished").all() and warm.any() == (warmup > 0)
    assert list(requests.columns[:len(REQUEST_COLUMNS)]) == list(REQUEST_COLUMNS)


def test_the_requests_table_holds_the_records_the_engine_handed_over(tmp_path):
    """Rows come from add records and the postprocess results' left records (preemptions
    and rejections included), one per trace request."""
    engine, recorder, df, kept, _, out = run(tmp_path, num_kv_blocks=3, block_size=64)
    left = {r.seq_id: r for kind, x, _ in kept if kind == "step" for r in x.post.left}
    requests = read_requests(out).set_index("request_id")
    assert len(requests) == len(df) and set(left) == set(range(len(df)))
    for column, field in (("output_tokens", "output_len"), ("dp_rank", "dp_rank"),
                          ("preemptions", "num_preemptions"),
                          ("recomputed_tokens", "recomputed_tokens"),
                          ("prefix_hit_tokens", "prefix_hit_tokens"), ("reason", "reason")):
        want = [getattr(left[i], field) for i in range(len(df))]
        assert requests[column].fillna("").tolist() == want, column
    assert (requests["status"] == [left[i].status for i in range(len(df))]).all()
    assert {"finished", "rejected"} <= set(requests["status"])
    assert requests["preemptions"].gt(0).any() and requests["recomputed_tokens"].gt(0).any()


def test_an_interrupted_run_counts_no_gap_of_an_unfinished_request(tmp_path):
    engine, recorder, df, kept, _, out = run(tmp_path, num_mtp=1, interrupt_after=60)
    requests = read_requests(out)
    assert (requests["status"] == "unfinished").any() and (requests["status"] == "finished").any()
    times, offsets = recount(df, kept)
    got = metrics.summarize(requests, *recorder.itl()).set_index(["metric", "stat"])
    want = metrics.summary(requests, times, offsets).set_index(["metric", "stat"])
    assert got.loc["itl", "value"].tolist() == pytest.approx(want.loc["itl", "value"].tolist())


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_tables_are_the_same_in_one_chunk_or_many(tmp_path, fmt):
    *_, whole = run(tmp_path, fmt, chunk_steps=10**6)
    *_, chunked = run(tmp_path, fmt, chunk_steps=3)
    for name in ("steps", "batches"):
        a, b = (read(out, name, fmt).drop(columns=HOST_TIMES, errors="ignore")
                for out in (whole, chunked))
        assert len(a) > 3
        pd.testing.assert_frame_equal(a, b)
    a, b = (read_requests(out, fmt) for out in (whole, chunked))
    pd.testing.assert_frame_equal(a, b)
    steps = read(whole, "steps", fmt)
    assert list(steps.columns) == list(TABLES["steps"].names) + ["run_id"]
    assert (steps["t_end_s"] >= steps["t_start_s"]).all() and steps["model_flops"].gt(0).any()
    assert not list(whole.glob(".*tmp"))


def test_a_sink_shows_nothing_until_closed(tmp_path):
    def rows(*values):
        return pd.DataFrame(dict(metric="m", stat="s", value=values, unit="s"))
    sink = TableSink(tmp_path, "summary", "parquet")
    sink.write(rows(0.0, 1.0))
    assert not (tmp_path / "summary.parquet").exists()
    sink.write(rows(2.0))
    sink.close()
    assert read(tmp_path, "summary")["value"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["summary.parquet"]


def test_a_stop_inside_a_step_still_records_that_step(tmp_path):
    engine, recorder, df, kept, steps, out = run(tmp_path, num_mtp=1, stop=stop_inside_step(50))
    assert steps["step"].nunique() == 51  # the step the stop arrived in, recorded
    requests = read_requests(out)
    assert (requests["output_tokens"].to_numpy() == output_lens(df, kept)).all()
    assert (requests["status"] == "unfinished").any()


def test_requests_done_on_arrival_count_as_done(tmp_path):
    engine, recorder, df, *_, out = run(tmp_path, engine_type="completion", max_new_tokens=1)
    assert recorder.num_done == len(df)
    assert (read_requests(out)["status"] == "finished").all()


def test_live_requests_are_released_as_they_leave(tmp_path):
    drained = run(tmp_path, num_mtp=1, overlap=True)
    assert drained[1].live == 0  # every request left before the recorder closed
    stopped = run(tmp_path, interrupt_after=10)
    assert stopped[1].live > 0 and stopped[1].log.num_live == 0  # close() let them go
    requests = read_requests(stopped[-1])
    assert requests["request_id"].tolist() == list(range(N))  # every trace request, once
    assert (requests["reason"] == "never enqueued").any()


def test_flush_ns_is_set_exactly_on_the_steps_that_flushed(tmp_path):
    *_, steps, out = run(tmp_path, chunk_steps=3)
    table = read(out, "steps")
    flushed = table["flush_ns"].to_numpy() > 0
    assert flushed.any() and (table["step"][flushed] % 3 == 0).all()
    assert flushed.tolist() == ((table["step"] % 3 == 0) & (table["step"] > 0)).tolist()
    assert table["flush_ns"].dtype == np.int64


def test_a_table_that_cannot_be_written_fails_at_close_and_is_not_left_behind(tmp_path):
    """A real write fault (the batches table's temporary name is taken by a folder):
    close() names the table, the other tables are whole. (The replay may stop at a flush
    first, once the writer has stopped reading: tests/test_killed_runs.py checks that.)"""
    engine = LLMEngine(engine_config())
    (tmp_path / ".batches.parquet.tmp").mkdir()
    recorder = Recorder(engine, 0, tmp_path, chunk_steps=2)
    df = trace()
    with contextlib.suppress(BrokenPipeError):
        replay(engine, Requests.of(df), "virtual", recorder)
    with pytest.raises(OSError, match="batches: IsADirectoryError"):
        recorder.close()
    assert not (tmp_path / "batches.parquet").exists()
    steps = read(tmp_path, "steps")["step"]
    assert steps.tolist() == list(range(len(steps))) and len(steps) >= 2


def records_of(engine, df):
    """Every add record and StepRecord of a drained modeled run of df."""
    added, records = [], []
    for i, (p, m) in enumerate(zip(df["prompt_len"], df["max_new_tokens"])):
        added.append(engine.add_request(i, prompt_len=int(p), max_new_tokens=int(m)))
    while engine.has_unfinished():
        record = engine.step()
        if record is not None:
            records.append(record)
    return added, records


def step_log(added, records, handoff="none"):
    """A StepLog fed the records; its request rows in request_id order."""
    log = _core.StepLog(0, 10**6, lambda: None, handoff=handoff)
    for a in added:
        log.enqueue(a, 0.0)
    for k, record in enumerate(records):
        log.record(record, k * 1e-3, (k + 1) * 1e-3)
    log.end()
    rows = log.take_requests()
    order = np.argsort(rows.pop("request_id"))
    return {name: np.asarray(column)[order] for name, column in rows.items()}


def test_the_step_log_needs_no_scheduler(tmp_path):
    engine = LLMEngine(engine_config(num_kv_blocks=3, block_size=64, num_mtp=1))
    added, records = records_of(engine, trace())
    want = step_log(added, records)
    del engine
    gc.collect()  # the scheduler is gone; its plans and results are not
    got = step_log(added, records)
    for name in want:
        assert np.array_equal(got[name], want[name], equal_nan=got[name].dtype.kind == "f"), name
    assert set(want["status"]) == {0, 1}  # finished and rejected


def test_the_step_logs_request_ends_are_the_declared_status_codes():
    """csrc/recorder/step_log.hpp's RequestEnd, by a log whose requests end each way: the
    schema's status codes (harness/schema/tables.py) name them."""
    engine = LLMEngine(engine_config(num_kv_blocks=4, block_size=64))
    added = [engine.add_request(i, prompt_len=p, max_new_tokens=m)
             for i, (p, m) in enumerate([(1000, 1), (8, 2), (8, 100)])]
    records = []
    while not any(r.seq_id == 1 for done in records for r in done.post.left):
        record = engine.step()
        if record is not None:
            records.append(record)
    status = step_log(added, records)["status"]
    codes = TABLES["requests"].column("status")
    assert [added[0].status, added[2].status] == ["rejected", "waiting"]
    assert status.tolist() == [codes.code(s) for s in ("rejected", "finished", "unfinished")]
    assert set(codes.value_names) == set(STATUSES)
    # a prompt engine's requests are handed off; its log says so (a log of another says not)
    added, records = records_of(LLMEngine(engine_config(engine_type="prompt")), trace().head(2))
    assert step_log(added, records, handoff="row")["status"].tolist() == \
        [codes.code("handed_off")] * 2
    assert step_log(added, records)["status"].tolist() == [codes.code("finished")] * 2


def test_a_step_log_refuses_what_does_not_belong_together():
    added, records = records_of(LLMEngine(engine_config()), trace())
    _, others = records_of(LLMEngine(engine_config()), trace())
    log = _core.StepLog(0, 10**6, lambda: None)
    log.record(records[0], 0.0, 1.0)
    mixed = dataclasses.replace(records[1], post=records[2].post)
    with pytest.raises(ValueError, match="the postprocess result of plan 2 was recorded with "
                                         "plan 1"):
        log.record(mixed, 1.0, 2.0)
    with pytest.raises(ValueError, match="of another scheduler"):
        log.record(dataclasses.replace(records[1], post=others[1].post), 1.0, 2.0)
    with pytest.raises(ValueError, match="comes from another scheduler"):
        log.record(others[1], 1.0, 2.0)
    with pytest.raises(ValueError, match="flops has 2 ranks; the plan has 1"):
        log.record(dataclasses.replace(records[1], flops=list(records[1].flops) * 2), 1.0, 2.0)
    with pytest.raises(TypeError, match="flops holds a StepCost per rank"):
        log.record(dataclasses.replace(records[1], flops=[(1.0, 1.0, 1.0)]), 1.0, 2.0)
    ref = ReferenceScheduler(engine_config().scheduler)
    ref.add_sequence(0, 8, 2)
    plan = ref.schedule()
    with pytest.raises(TypeError, match="must come from an engine._core.Scheduler"):
        log.record(dataclasses.replace(records[1], plan=plan, post=ref.postprocess(plan)),
                   1.0, 2.0)
    log.enqueue(added[0], 0.0)
    with pytest.raises(ValueError, match="request 0 was enqueued twice"):
        log.enqueue(added[0], 0.0)


def test_a_step_s_times_reach_the_log_as_one_typed_record():
    """LLMEngine builds one _core.StepTimes per step; the StepRecord's time attributes read
    it, and the C++ log takes its columns from it (a record whose times are anything else is
    a TypeError, naming what it got)."""
    _, records = records_of(LLMEngine(engine_config()), trace())
    record = records[1]
    names = ["start_ns", "sched_call_ns", "forward_ns", "sample_ns", "postprocess_ns", "step_ns"]
    assert isinstance(record.times, _core.StepTimes)
    assert [getattr(record, n) for n in names] == [getattr(record.times, n) for n in names]
    assert record.step_ns >= record.sched_call_ns + record.postprocess_ns > 0
    times = _core.StepTimes.of(start_ns=1, sched_call_ns=2, forward_ns=3, sample_ns=4,
                            postprocess_ns=5, step_ns=6)
    with pytest.raises(AttributeError):
        times.forward_ns = 7  # read-only once built
    log = _core.StepLog(0, 10**6, lambda: None)
    log.record(records[0], 0.0, 1.0)
    log.record(dataclasses.replace(records[1], times=times), 1.0, 2.0)
    steps = log.take_steps()
    assert [int(steps[n][-1]) for n in names[1:]] == [2, 3, 4, 5, 6]
    assert int(steps["forward_ns"][0]) == records[0].forward_ns
    with pytest.raises(TypeError, match="record.times must be an engine._core.StepTimes, "
                                        "got <class 'tuple'>"):
        log.record(dataclasses.replace(records[2], times=(1, 2, 3, 4, 5, 6)), 2.0, 3.0)


@pytest.mark.parametrize("sched", [
    dict(num_kv_blocks=3, num_mtp=2), dict(num_kv_blocks=4, overlap=True, dp_size=2),
    dict(engine_type="completion", num_kv_blocks=3), dict(engine_type="prompt")],
    ids=["mtp+preempt+reject", "overlap+dp", "completion", "prompt"])
def test_the_records_of_the_core_and_the_reference_agree(sched):
    """add_sequence's and postprocess's records: C++ and the Python reference alike, and
    the reference's equal to its own sequences when they left."""
    config = SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8, block_size=64, **sched)
    cpp, ref = Scheduler(config), ReferenceScheduler(config)
    df, rng, outstanding = trace(), np.random.default_rng(1), []
    fields = ("seq_id", "dp_rank", "status", "output_len", "num_preemptions",
              "recomputed_tokens", "prefix_hit_tokens", "reason")

    def same(a, b, where):
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields], where

    for i, (p, m) in enumerate(zip(df["prompt_len"], df["max_new_tokens"])):
        same(cpp.add_sequence(i, int(p), int(m)), ref.add_sequence(i, int(p), int(m)), i)
    for _ in range(5000):
        if ref.is_finished() and not outstanding:
            break
        if not ref.is_finished():
            outstanding.append((cpp.schedule(), ref.schedule()))
        if len(outstanding) > 1 or not config.overlap or ref.is_finished():
            got_plan, want_plan = outstanding.pop(0)
            accepted = [rng.integers(0, np.maximum(b.seqlen_q, 1)) * (b.kind == 2)
                        for b in want_plan.batches] if config.num_mtp else None
            got, want = cpp.postprocess(got_plan, accepted), ref.postprocess(want_plan, accepted)
            assert got.step == want.step == want_plan.step
            assert np.array_equal(got.output_len, want.output_len)
            assert got.output_len.dtype == want.output_len.dtype == np.int32
            assert len(got.left) == len(want.left)
            for a, b in zip(got.left, want.left):
                same(a, b, want.step)
                same(b, ref.seq(b.seq_id), want.step)
            rows = [ref.seq(int(i)).output_len for b in want_plan.batches for i in b.seq_ids]
            assert want.output_len.tolist() == rows
    assert ref.is_finished() and cpp.is_finished() and not outstanding


def stalls(sched, requests):
    """decode_stall_s, first and last token time of each request of a modeled run of
    `requests` ((prompt_len, max_new_tokens), all enqueued at 0), its step k recorded as
    running from T_k to T_k + k + 1 (T_k the sum of the earlier spans), and the run's
    per-request rows as the latency summary takes them."""
    e = LLMEngine(EngineConfig(model="deepseek-v3", executor="modeled:H200", precision="fp8",
                               mtp_acceptance=0.0, scheduler=SchedulerConfig(
                                   **{**dict(max_num_batched_tokens=4, max_num_seqs=16,
                                             num_kv_blocks=512, block_size=64), **sched})))
    added = [e.add_request(i, prompt_len=p, max_new_tokens=m)
             for i, (p, m) in enumerate(requests)]
    log = _core.StepLog(0, 10**6, lambda: None)
    for a in added:
        log.enqueue(a, 0.0)
    t, k = 0.0, 0
    while e.has_unfinished():
        record = e.step()
        if record is not None:
            log.record(record, t, t + k + 1)
            t, k = t + k + 1, k + 1
    log.end()
    rows = log.take_requests()
    order = np.argsort(rows["request_id"])
    return {name: np.asarray(rows[name])[order]
            for name in ("decode_stall_s", "first_token_s", "last_token_s", "preemptions")}


def test_decode_stall_is_the_prompt_rounds_a_decoding_request_sat_out():
    # The vote, budget 4. Step 0 [0, 1]: A's final chunk (2) and B's first chunk (2);
    # step 1 [1, 3]: B's final chunk (4), a prompt round A sits out; steps 2 [3, 6], 3 [6,
    # 10], 4 [10, 15] decode. A: tokens at 1, 6, 10, 15, stalled 2 (step 1); B: at 3, 6.
    got = stalls({}, [(2, 4), (6, 2)])
    assert got["decode_stall_s"].tolist() == [2.0, 0.0]
    assert got["first_token_s"].tolist() == [1.0, 3.0]
    assert got["last_token_s"].tolist() == [15.0, 6.0]


def test_decode_stall_with_mixed_batches_is_the_steps_that_ran_out_of_budget():
    # 9.15, q = 3, budget 7, no draft accepted. Step 0 [0, 1]: x, y, z final chunks; step 1
    # [1, 3]: z, y decode, x waits; step 2 [3, 6]: x, z decode (z finishes), y waits;
    # step 3 [6, 10]: y, x decode and finish.
    got = stalls(dict(mixed_batches=True, max_num_batched_tokens=7, num_mtp=2),
                 [(1, 3), (1, 3), (1, 3)])
    assert got["decode_stall_s"].tolist() == [2.0, 3.0, 0.0]
    assert got["last_token_s"].tolist() == [10.0, 10.0, 6.0]
    summary = metrics.LatencySummary(3)
    columns = dict(status=np.array(["finished"] * 3, dtype=object), prompt_len=np.ones(3),
                   output_tokens=np.full(3, 3), arrival_s=np.zeros(3), **got,
                   **{f"{m}_s": np.zeros(3) for m in metrics.LatencySummary.METRICS})
    summary.add(columns, np.zeros(3, bool))
    rows = summary.rows(np.array([]))
    value = {(m, s): v for m, s, v, _ in rows.itertuples(index=False)}
    assert value["decode_stall", "share"] == pytest.approx(5 / 23)  # spans 9, 9, 5
    assert (value["decode_stall", "p50"], value["decode_stall", "max"]) == (2.0, 3.0)


def test_a_preempted_request_is_not_stalled_while_it_is_recomputed():
    # Four 4-token blocks. A (4, 7) and B (4, 8) decode until step 5, which needs a third
    # block for each: A, the earlier add, is preempted. B decodes alone in steps 5 - 7 while
    # A waits for room; A's prefill again (step 8, a prompt round B has left) samples its
    # sixth token, step 9 its last. A sat out steps 5 - 7 recomputed, not decoding: no stall.
    got = stalls(dict(num_kv_blocks=4, block_size=4, max_num_batched_tokens=256),
                 [(4, 7), (4, 8)])
    assert got["decode_stall_s"].tolist() == [0.0, 0.0]
    assert got["preemptions"].tolist() == [1, 0]
    assert got["last_token_s"].tolist() == [55.0, 36.0]  # the ends of steps 9 and 7


def test_a_completion_engine_never_stalls_a_decode():
    # Requests arrive with their first token; the second waits for room (one block), then
    # decodes alone: neither the wait nor anything else is a stall.
    got = stalls(dict(engine_type="completion", num_kv_blocks=1), [(8, 3), (8, 3)])
    assert got["decode_stall_s"].tolist() == [0.0, 0.0]
    assert got["first_token_s"].tolist() == [0.0, 0.0]
