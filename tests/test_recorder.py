"""The recorder: chunked tables, and the C++ token accounting against a Python recount.

The recount stamps each sampled row's 1 + accepted tokens at its step's end, keeps each
request's first output_len of them and stamps tokens a request arrived with at its enqueue
time; the summary it gives through metrics.summary must equal the one the recorder's
per-request times and inter-token histogram give through metrics.summarize.
"""

import threading

import numpy as np
import pandas as pd
import pytest

from engine import EngineConfig, LLMEngine, SchedulerConfig
from engine.plan import KIND_CHUNK
from harness import metrics, tables
from harness.recorder import Recorder
from harness.schema import TABLES
from harness.replay import replay
from harness.table_sink import TableSink

N = 40
HOST_TIMES = ["sched_cpp_ns", "sched_call_ns", "step_ns", "sample_ns", "postprocess_ns"]


def trace(seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(dict(arrival_s=np.sort(rng.uniform(0, 0.2, N)),
                             prompt_len=rng.integers(1, 200, N), max_new_tokens=rng.integers(1, 30, N)))


def run(tmp_path, fmt="parquet", chunk_steps=1024, warmup=0, interrupt_after=None, stop=None,
        max_new_tokens=None, **sched):
    """A modeled replay of trace() with every StepRecord kept; returns what was recorded."""
    config = EngineConfig(model="deepseek-v3", executor="modeled:H200", precision="fp8",
                          mtp_acceptance=0.6, scheduler=SchedulerConfig(
                              max_num_batched_tokens=256, max_num_seqs=16, num_kv_blocks=512,
                              **sched))
    engine = LLMEngine(config)
    out = tmp_path / f"{fmt}-{chunk_steps}-{warmup}"
    out.mkdir()
    recorder = Recorder(engine, warmup, TableSink(out, "steps", fmt, dict(run_id="r")),
                        TableSink(out, "batches", fmt, dict(run_id="r")), chunk_steps=chunk_steps)
    kept = []

    class Keeping:  # the recorder's face, keeping every record for the recount
        num_done = property(lambda self: recorder.num_done)

        def enqueue(self, i, t):
            kept.append(("enqueue", i, t))
            recorder.enqueue(i, t)

        def step(self, record, t0, t1):
            kept.append(("step", record, t1))
            recorder.step(record, t0, t1)
            if interrupt_after is not None and len(kept) > interrupt_after:
                raise KeyboardInterrupt

    df = trace()
    if max_new_tokens is not None:
        df["max_new_tokens"] = max_new_tokens
    try:
        replay(engine, df["arrival_s"].to_numpy(), df["prompt_len"].to_numpy(),
               df["max_new_tokens"].to_numpy(), "virtual", Keeping(), stop=stop and stop(engine))
    except KeyboardInterrupt:
        pass
    steps = recorder.close()
    return engine, recorder, df, kept, steps, out


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


def recount(engine, df, kept):
    """Token times in the CSR layout of metrics.per_request, the way the harness stamped
    them before the C++ recorder."""
    enqueued, tokens = {}, {i: [] for i in range(len(df))}
    for kind, x, t in kept:
        if kind == "enqueue":
            enqueued[x] = t
            continue
        batches = x.batches
        for batch, accepted in zip(batches, x.accepted or [None] * len(batches)):
            sampled = batch.kind != KIND_CHUNK
            counts = 1 + (np.zeros(len(batch.kind), np.int64) if accepted is None else accepted)
            for seq_id, count in zip(batch.seq_ids[sampled], counts[sampled]):
                tokens[int(seq_id)] += [t] * int(count)
    output_len = np.array([engine.scheduler.seq(i).output_len if i in enqueued else 0
                           for i in range(len(df))])
    times = []
    for i in range(len(df)):
        got = tokens[i][:output_len[i]]
        times += [enqueued.get(i)] * (output_len[i] - len(got)) + got
    return np.array(times, dtype=np.float64), np.concatenate(([0], np.cumsum(output_len)))


@pytest.mark.parametrize("sched", [dict(num_mtp=2), dict(num_mtp=1, overlap=True),
                                   dict(engine_type="completion"), dict()],
                         ids=["mtp", "mtp+overlap", "completion", "plain"])
@pytest.mark.parametrize("warmup", [0, 5])
def test_token_times_match_a_python_recount(tmp_path, sched, warmup):
    engine, recorder, df, kept, _, _ = run(tmp_path, warmup=warmup, **sched)
    requests = tables.requests_frame(engine, recorder, df)
    warm = tables.warmup_requests(recorder, len(df), warmup)
    times, offsets = recount(engine, df, kept)
    want = metrics.per_request(requests.drop(columns=["first_token_s", "last_token_s"]),
                               times, offsets)
    pd.testing.assert_frame_equal(requests, want[requests.columns])
    got = metrics.summarize(requests, *recorder.itl(), warmup=warm)
    pd.testing.assert_frame_equal(got, metrics.summary(requests, times, offsets, warmup=warm),
                                  rtol=1e-12)
    assert (requests["status"] == "finished").all() and warm.any() == (warmup > 0)


def test_an_interrupted_run_counts_no_gap_of_an_unfinished_request(tmp_path):
    engine, recorder, df, kept, _, _ = run(tmp_path, num_mtp=1, interrupt_after=60)
    requests = tables.requests_frame(engine, recorder, df)
    assert (requests["status"] == "unfinished").any() and (requests["status"] == "finished").any()
    times, offsets = recount(engine, df, kept)
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


def test_rows_reach_disk_chunk_by_chunk(tmp_path):
    import pyarrow.parquet as pq
    *_, steps, out = run(tmp_path, chunk_steps=4)
    n = steps["step"].nunique()
    groups = pq.ParquetFile(out / "steps.parquet").metadata.num_row_groups
    assert n > 8 and groups >= n // 4  # one row group per flush: never all at the end


def test_a_stop_inside_a_step_still_records_that_step(tmp_path):
    engine, recorder, df, kept, steps, _ = run(tmp_path, num_mtp=1, stop=stop_inside_step(50))
    assert steps["step"].nunique() == 51  # the step the stop arrived in, recorded
    requests = tables.requests_frame(engine, recorder, df)
    tokens = recorder.requests()["tokens"]
    assert (requests["output_tokens"].to_numpy()[:len(tokens)] == tokens).all()
    assert (requests["status"] == "unfinished").any()


def test_requests_done_on_arrival_count_as_done(tmp_path):
    engine, recorder, df, *_ = run(tmp_path, engine_type="completion", max_new_tokens=1)
    assert recorder.num_done == len(df)
    assert (tables.requests_frame(engine, recorder, df)["status"] == "finished").all()
