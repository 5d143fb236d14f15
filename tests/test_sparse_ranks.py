"""Idle DP ranks leave their step rows out (docs/tables.md, "steps"): the step log writes a
busy rank's row and an idle rank's only where it holds something the other rows lack, and
every step carries its aggregates over all its ranks; the summary and the report read the
same answers from the rows left as from a row per rank."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from engine import EngineConfig, LLMEngine, Scheduler, SchedulerConfig, _core
from engine.deployment import Deployment
from harness.analysis.report import trace_events
from harness.analysis.report.figures.ranks import _by_step
from harness.analysis.report.run_data import RunData
from harness.analysis.report.timeline import per_step
from harness.record.run import Run
from harness.record.step_summary import PARTS, engine_summary
from tests.helpers import modeled_runs

pytestmark = pytest.mark.core

DP = 8
TIMES = [column for column, _ in PARTS] + ["rank_s"]
FP8 = dict(attention="fp8", kv="bf16", dense="fp8", experts="fp8", dispatch="fp8",
           combine="bf16")


def records(stack, dp=DP, prompts=(2048, 1024, 30, 300), outputs=(3, 6, 9, 5)):
    """Every StepRecord of DeepSeek-V3 on modeled H200s, DP attention and EP over `dp`
    ranks (round robin: prompt i on rank i, the others idle)."""
    d = Deployment(precision=dict(FP8), devices=dp, attention_dp=dp, moe_ep=dp, stack=stack)
    engine = LLMEngine(EngineConfig(
        scheduler=SchedulerConfig(max_num_batched_tokens=65536, num_kv_blocks=4096,
                                  block_size=64, dp_size=dp),
        model="deepseek-v3", executor="modeled:H200", precision="fp8", deployment=d))
    for i, (n, m) in enumerate(zip(prompts, outputs)):
        engine.add_request(i, prompt_len=n, max_new_tokens=m)
    out = []
    while engine.has_unfinished():
        record = engine.step()
        if record is not None:
            out.append(record)
    return out


def logged(steps_records):
    """The steps columns a StepLog writes for these records, as a frame."""
    log = _core.StepLog(0, 10**6, lambda: None)
    for k, record in enumerate(steps_records):
        log.record(record, k * 1e-3, (k + 1) * 1e-3)
    return pd.DataFrame(log.take_steps())


def idle(batch) -> bool:
    return batch.empty and batch.num_running == 0 and batch.num_waiting == 0


def times(cost) -> list:
    return [getattr(cost, name) for name in TIMES]


@pytest.mark.parametrize("stack", ["roofline", "trtllm"])
def test_a_step_has_its_busy_ranks_rows_and_its_aggregates_over_every_rank(stack):
    """Against every rank's cost and batch: the rows left hold each part's and rank_s's
    largest value and every extrapolated bit; the aggregates are over all ranks. On a
    roofline an idle rank's times are below a busy one's, so only busy ranks have rows;
    kernel tables look a decode step's idle rank's all-to-alls up below their rows (an
    extrapolated bit no busy rank has), so one idle rank keeps its row there."""
    recs = records(stack)
    steps = logged(recs)
    assert steps["step"].tolist() == sorted(steps["step"])
    left_out = kept_idle = 0
    for k, record in enumerate(recs):
        rows = steps[steps["step"] == k]
        costs, batches = record.flops, record.plan.batches
        busy = {r for r, b in enumerate(batches) if not idle(b)}
        written = set(rows["dp_rank"])
        assert busy <= written and len(written) == len(rows) >= 1
        idle_rows = len(written - busy)
        assert idle_rows <= (0 if stack == "roofline" else 1)
        kept_idle += idle_rows
        first = rows.iloc[0]
        assert len(rows) + first["idle_ranks"] == DP
        assert (rows[["slowest_rank_s", "mean_rank_s", "idle_ranks"]].nunique() == 1).all()
        rank_s = [c.rank_s for c in costs]
        assert first["slowest_rank_s"] == max(rank_s)
        assert first["mean_rank_s"] == pytest.approx(np.mean(rank_s), rel=1e-12)
        assert first["dp_imbalance"] == pytest.approx(max(rank_s) / np.mean(rank_s), rel=1e-12)
        assert rows[TIMES].max().tolist() == np.max([times(c) for c in costs], axis=0).tolist()
        assert np.bitwise_or.reduce(rows["extrapolated"].to_numpy()) == \
            np.bitwise_or.reduce([c.extrapolated for c in costs])
        assert first["idle_kv_blocks_free"] == sum(
            b.kv_blocks_free for r, b in enumerate(batches) if r not in written)
        left_out += DP - len(rows)
    assert left_out > 0 and (kept_idle > 0) == (stack == "trtllm")


def bare(plan, post, costs):
    return SimpleNamespace(plan=plan, post=post, flops=costs,
                           times=_core.StepTimes.of(0, 0, 0, 0, 0, 0))


def test_a_step_no_rank_was_busy_in_keeps_its_first_ranks_row():
    scheduler = Scheduler(SchedulerConfig(dp_size=4))
    plan = scheduler.schedule()
    record = bare(plan, scheduler.postprocess(plan, None), [_core.StepCost(0, 0, 0)] * 4)
    steps = logged([record])
    assert steps[["step", "dp_rank", "empty", "idle_ranks"]].values.tolist() == [[0, 0, 1, 3]]


def test_an_idle_rank_holding_the_step_s_longest_part_keeps_its_row():
    (record, *_) = records("roofline", dp=2, prompts=(512,), outputs=(2,))  # rank 1 idle
    assert idle(record.plan.batches[1])
    busy, spare = record.flops
    assert logged([record])["dp_rank"].tolist() == [0]
    longer = spare.with_parts(spare.attention_s, spare.dense_s, busy.experts_s * 2,
                              spare.dispatch_s, spare.combine_s)
    steps = logged([dataclasses.replace(record, flops=[busy, longer])])
    assert steps["dp_rank"].tolist() == [0, 1] and (steps["idle_ranks"] == 0).all()


def dense_steps(ranks=4):
    """Three measured steps with a row per rank (a steps table from before idle rows were
    left out): ranks 2 and 3 idle in step 1, all but rank 0 in step 2."""
    step = np.repeat([0, 1, 2], ranks)
    busy = np.array([1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0], bool)
    rank_s = np.where(busy, [.03, .05, .02, .04, .06, .01, 0, 0, .02, 0, 0, 0], .004)
    frame = pd.DataFrame(dict(
        step=step, dp_rank=np.tile(np.arange(ranks), 3), warmup=False,
        sched_call_ns=1000, sched_cpp_ns=800, step_ns=np.repeat([9000, 8000, 7000], ranks),
        forward_ns=np.repeat([60e6, 70e6, 30e6], ranks), model_flops=np.where(busy, 1e12, 0),
        t_start_s=np.repeat([0.0, 0.1, 0.2], ranks), t_end_s=np.repeat([0.07, 0.18, 0.23], ranks),
        prefill_tokens_q=np.where(busy, 10, 0), prefix_hit_tokens=0, kv_blocks_evicted=0,
        attention_s=np.where(busy, rank_s / 2, 0), dense_s=np.where(busy, rank_s / 4, 0),
        experts_s=0.002, dispatch_s=np.where(busy, rank_s / 8, 0.001), combine_s=0.001,
        allreduce_s=0.0, extrapolated=np.where(busy, 0, 8).astype(np.int8), rank_s=rank_s))
    return frame, busy


def test_the_summary_of_the_rows_left_is_that_of_a_row_per_rank():
    dense, busy = dense_steps()
    by_step = dense.groupby("step")["rank_s"]
    kept = busy.copy()
    kept[[6, 9]] = True  # an idle rank's row a step: the extrapolated bit no busy one has
    sparse = dense[kept].assign(
        slowest_rank_s=by_step.transform("max")[kept],
        mean_rank_s=by_step.transform("mean")[kept],
        idle_ranks=(~pd.Series(kept)).groupby(dense["step"]).transform("sum")[kept])
    pd.testing.assert_frame_equal(engine_summary(sparse, 2000.0), engine_summary(dense, 2000.0))
    rows = engine_summary(sparse, 2000.0).set_index(["metric", "stat"])["value"]
    assert rows["dp_imbalance", "max"] > 1 and rows["achieved", "tflops_per_device"] == \
        pytest.approx(7e12 / 0.16 / 4 / 1e12)  # seven busy rows' FLOPs on four ranks' devices


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    (path,) = modeled_runs(tmp_path_factory.mktemp("sparse"),
                           "deployment={devices: 8, attention: {dp: 8}, moe: {ep: 8}}")
    return RunData(Run.read(path)), pd.read_parquet(path / "steps.parquet")


def test_the_ranks_figure_reads_the_waited_for_rank_and_the_mean_over_every_rank(run):
    data, steps = run
    s = _by_step(data)
    by_step = steps.groupby("step")
    assert (s["ranks"] == DP).all() and (by_step.size() < DP).any()
    assert (s["slowest"] == by_step["rank_s"].max()).all()
    waited = steps.loc[by_step["rank_s"].idxmax(), "dp_rank"]
    assert s["who"].tolist() == waited.tolist()
    assert (s["tokens_q"] == by_step["tokens_q"].sum()).all()  # an idle rank adds nothing


def test_a_sum_over_ranks_adds_the_idle_ranks_free_blocks(run):
    data, steps = run
    _, sums = per_step(data.step_key(), data.columns("steps", ["kv_blocks_free"]),
                       idle=data.idle_sums(["kv_blocks_free"]))
    by_step = steps.groupby("step")
    assert sums["kv_blocks_free"].tolist() == \
        (by_step["kv_blocks_free"].sum() + by_step["idle_kv_blocks_free"].first()).tolist()
    assert sums["kv_blocks_free"].max() <= DP * 256  # the workload's blocks per rank


def test_a_rank_s_counters_go_idle_in_a_step_it_has_no_row_in(run):
    data, steps = run
    start = steps.groupby("step")["t_start_s"].first() * 1e6
    events = [e for e in trace_events.events(data) if e["ph"] == "C" and e["name"] == "running"]
    checked = 0
    for rank, mine in steps.groupby("dp_rank"):
        have = set(mine["step"])
        gone = [s + 1 for s in have if s + 1 in start.index and s + 1 not in have]
        at = {e["ts"]: e["args"]["running"] for e in events if e["pid"] == rank}
        for step in gone:
            if mine.loc[mine["step"] < step, "running"].iloc[-1] > 0:  # else nothing changes
                assert at[start[step]] == 0
                checked += 1
    assert checked > 0
