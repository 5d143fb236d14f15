"""A run's steady-state window and its figures (docs/frontier.md, "The steady-state
window"): hand-made tables, where each figure is worked by hand, and one modeled run."""

import math
import re
import shutil

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from harness.analysis import steady_state as ss
from harness.analysis.steady_state import of_run, steady_state
from harness.errors import BadInput
from harness.record.run import Run
from tests.helpers import REPO, modeled_runs

DT = 0.25  # seconds a hand-made step lasts: exact in binary
DEVICES = 8


def steps_table(running, *, t_end=None, role="colocated", instance=0, ranks=2, decode=None,
                prefill=16, cached=4, warmup=0, idle_rows=True):
    """One instance's steps, a row a rank: the running sequences split over the ranks (rank
    0 the larger share), each decoding one position a sequence (or `decode` positions a
    step), rank 0 computing `prefill` prompt tokens and finding `cached` in the prefix
    cache; step k ends at (k + 1) DT unless `t_end` says; the first `warmup` steps are
    warm-up. `idle_rows` false: a rank that ran nothing has no row."""
    t_end = [(k + 1) * DT for k in range(len(running))] if t_end is None else t_end
    decode = running if decode is None else decode
    rows = []
    for k, (n, d, t) in enumerate(zip(running, decode, t_end)):
        for rank in range(ranks):
            share = n // ranks + (rank < n % ranks)
            positions = d // ranks + (rank < d % ranks)
            p, c = (prefill, cached) if rank == 0 else (0, 0)
            if share == positions == p == 0 and not idle_rows:
                continue
            rows.append(dict(role=role, instance=instance, step=k, dp_rank=rank,
                             warmup=k < warmup, running=share, tokens_q=positions + p,
                             prefill_tokens_q=p, prefix_hit_tokens=c, t_end_s=t))
    return pd.DataFrame(rows)


def finals_table(steps_of_finals, role="colocated", instance=0):
    """The batches table's rows that matter: one `final` chunk in each step listed (and a
    decode row, which counts for nothing here)."""
    rows = [dict(role=role, instance=instance, step=k, kind="final") for k in steps_of_finals]
    rows.append(dict(role=role, instance=instance, step=0, kind="decode"))
    return pd.DataFrame(rows)


def requests_table(arrivals, output_total, *, first_after=DT, decode_for=2.0, tpot=0.02,
                   ttft=None):
    """Requests arriving at `arrivals`, whose output tokens sum to `output_total` (the first
    request holds what the others' one each leaves), first token `first_after` and last
    token `decode_for` seconds after arriving, all finished."""
    arrival = np.asarray(arrivals, float)
    n = len(arrival)
    return pd.DataFrame(dict(
        arrival_s=arrival, first_token_s=arrival + first_after,
        last_token_s=arrival + decode_for,
        output_tokens=[output_total - (n - 1)] + [1] * (n - 1), status="finished",
        ttft_s=np.full(n, first_after) if ttft is None else ttft,
        tpot_s=np.broadcast_to(tpot, n).astype(float)))


# A ramp, a plateau and a drain: 80 steps of DT; running sequences 2, 4, 6, 8, then 10 up
# to step 63, then 8, 8, 6, 6, ... down to 1. A request arrives every DT from 0 to 15 s
# (61 of them), its final prefill chunk in step j, the step ending DT after it arrives.
RAMP = [2, 4, 6, 8] + [10] * 60 + [8, 8, 6, 6, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
ARRIVALS = [j * DT for j in range(61)]
DECODE_ALL = sum(RAMP)  # without MTP a decode position is a token committed
OUTPUT_ALL = DECODE_ALL + len(ARRIVALS)  # and each final chunk samples one
TTFT = [0.01 * j for j in range(61)]
TPOT = [0.02 if j < 30 else 0.05 for j in range(61)]


def ramp_run(**steps):
    return (steps_table(RAMP, **steps), finals_table(range(61)),
            requests_table(ARRIVALS, OUTPUT_ALL, ttft=TTFT, tpot=TPOT))


def test_a_ramp_then_a_plateau_gives_the_window_and_its_figures_by_hand():
    s = steady_state(*ramp_run(), DEVICES)
    assert s.found and s.reason == ""
    # the plateau (10) starts at step 4, ending at 1.25 s; the last arrival is at 15 s,
    # where step 59 ends: steps 5 .. 59 are in the window
    assert (s.start_s, s.end_s, s.length_s, s.steps) == (1.25, 15.0, 13.75, 55)
    # output: 55 steps x 10 positions, and the final chunks of requests 5 .. 59
    assert s.output_tokens_per_s_per_device == pytest.approx((550 + 55) / 13.75 / 8)  # 5.5
    # input: 16 computed and 4 cached prompt tokens a step
    assert s.total_tokens_per_s_per_device == pytest.approx((605 + 55 * 20) / 13.75 / 8)
    # completing in the window: last token 2 s after arriving, in (1.25, 15]: requests 0 .. 52
    assert s.requests_per_s == pytest.approx(53 / 13.75)
    # decoding in it (the middle of first to last token, arrival + 1.125 s, inside):
    # requests 1 .. 55, 29 at TPOT 0.02 s and 26 at 0.05 s: the median 1 / TPOT is 50
    assert s.tokens_per_s_per_user == pytest.approx(50)
    # arriving in it: requests 6 .. 60, TTFT 0.06 .. 0.60 s; TPOT 24 at 0.02 s, 31 at 0.05 s
    assert s.ttft_p50_s == pytest.approx(0.33) and s.ttft_p90_s == pytest.approx(0.546)
    assert (s.tpot_p50_s, s.tpot_p90_s) == (0.05, 0.05)


def test_fill_and_drain_are_left_out():
    # a slower fill and a drain twice as long: the whole run's average moves, the window's not
    ramp = [1, 1, 3, 7] + RAMP[4:64] + [1] * 32
    whole = [(sum(r) + 61) / (len(r) * DT) / DEVICES for r in (RAMP, ramp)]
    assert whole == pytest.approx([729 / 20 / 8, 705 / 24 / 8])  # 4.56 and 3.67 tok/s
    s = steady_state(steps_table(ramp), finals_table(range(61)),
                     requests_table(ARRIVALS, sum(ramp) + 61), DEVICES)
    assert s.found and s.start_s == 1.25
    assert s.output_tokens_per_s_per_device == pytest.approx(5.5)


def test_warm_up_steps_are_left_out_of_the_window():
    s = steady_state(*ramp_run(warmup=10), DEVICES)
    assert s.found and s.start_s == 10 * DT + DT  # the first step after the warm-up's ten


def test_mtp_positions_count_at_the_runs_yield_of_committed_tokens():
    # every decode position computed twice over (half the drafts rejected), the same
    # tokens committed: the window's output is what it was without MTP
    steps, batches, requests = ramp_run(decode=[2 * n for n in RAMP])
    s = steady_state(steps, batches, requests, DEVICES)
    assert s.output_tokens_per_s_per_device == pytest.approx(5.5)


def test_a_series_still_rising_at_the_last_arrival_has_no_window():
    running = list(range(1, 81))  # one more sequence each step, to the last arrival
    arrivals = [j * DT for j in range(80)]
    s = steady_state(steps_table(running), finals_table(range(80)),
                     requests_table(arrivals, sum(running) + 80), DEVICES)
    assert not s.found and s.reason.startswith("still filling at the last arrival")
    assert math.isnan(s.output_tokens_per_s_per_device) and s.steps == 0


def test_a_rise_too_short_to_judge_is_judged_over_the_later_arrivals():
    # a ramp of 40 half-second steps to 160 sequences, then 40 steps of 50 ms creeping on
    # to 200: the window (from 90 % of the level) is a few percent of the arrivals, its rise
    # within the tolerance; the arrivals' later half shows the fill
    t_end = [0.5 * (k + 1) for k in range(40)] + [20 + 0.05 * (k + 1) for k in range(40)]
    running = [4 * (k + 1) for k in range(40)] + [160 + k + 1 for k in range(40)]
    s = steady_state(steps_table(running, t_end=t_end), finals_table(range(80)),
                     requests_table([0, 22], sum(running) + 80), DEVICES)
    assert not s.found and s.reason.startswith("still filling at the last arrival")
    assert "the arrival span's later half" in s.reason and "reached late" in s.reason


def test_bursts_without_a_trend_are_not_a_fill():
    # 2 or 20 sequences: 40 % of the steps high in the first half, 60 % in the second; the
    # later half's median (20) is no higher than the earlier half's upper quartile
    running = [20 if k % 5 < (2 if k < 40 else 3) else 2 for k in range(80)]
    arrivals = [j * DT for j in range(80)]
    s = steady_state(steps_table(running), finals_table(range(80)),
                     requests_table(arrivals, sum(running) + 80), DEVICES)
    assert s.found and s.start_s == DT


def test_a_short_run_has_no_window():
    running = [10] * 10
    s = steady_state(steps_table(running), finals_table(range(10)),
                     requests_table([0, 2.5], sum(running) + 10), DEVICES)
    assert not s.found and s.reason.startswith("too short")
    assert f"MIN_STEPS ({ss.MIN_STEPS})" in s.reason


def test_a_plateau_reached_only_in_the_arrival_spans_last_stretch_has_no_window():
    # 20 long steps at one sequence, then 60 short ones at ten: the later half of the
    # arrivals is mostly short steps, so the level is ten, first reached at 20.05 s of 23
    t_end = [float(k + 1) for k in range(20)] + [20 + 0.05 * (k + 1) for k in range(60)]
    running = [1] * 20 + [10] * 60
    s = steady_state(steps_table(running, t_end=t_end), finals_table(range(80)),
                     requests_table([0, 23], sum(running) + 80), DEVICES)
    assert not s.found and s.reason.startswith("the plateau is reached late")


def test_requests_arriving_at_once_have_no_window():
    s = steady_state(*ramp_run()[:2], requests_table([0.0] * 5, OUTPUT_ALL), DEVICES)
    assert not s.found and "arrived at once" in s.reason


def test_in_a_pd_run_the_decode_pool_alone_decides():
    # two decode instances, their steps half a step apart: instance 0 runs 5 from its step 3
    # (1.0 s), instance 1 from its step 6 (0.125 + 7 DT = 1.875 s): the pool's 10 from then
    arrivals = [j * DT for j in range(61)]
    decode = [steps_table([0, 0, 0] + [5] * 77, role="decode", instance=0, prefill=0,
                          cached=0),
              steps_table([0] * 6 + [5] * 74, role="decode", instance=1, prefill=0, cached=0,
                          t_end=[0.125 + (k + 1) * DT for k in range(80)])]

    def run(prefill_running):
        prefill = steps_table(prefill_running, role="prefill", decode=[0] * 80)
        steps = pd.concat([prefill, *decode], ignore_index=True)
        return steady_state(steps, finals_table(range(61), role="prefill"),
                            requests_table(arrivals, 5 * 77 + 5 * 74 + 61), DEVICES)

    flat, rising = run([3] * 80), run(list(range(80)))  # the prefill pool still filling
    assert flat.found and flat.start_s == 1.875
    assert rising == flat


def test_idle_ranks_rows_absent_or_present_give_the_same_window():
    # rank 0 runs 5 sequences from the start; rank 1 nothing until step 8 (2.25 s), then 5:
    # the instance's running sequences are their sum, full from 2.25 s
    def steps(idle_rows):
        rank1 = steps_table([0] * 8 + [5] * 72, ranks=1, prefill=0, cached=0,
                            idle_rows=idle_rows).assign(dp_rank=1)
        table = pd.concat([steps_table([5] * 80, ranks=1), rank1], ignore_index=True)
        return table.sort_values(["step", "dp_rank"], ignore_index=True)

    requests = requests_table(ARRIVALS, 5 * 80 + 5 * 72 + 61)
    present, absent = (steady_state(steps(rows), finals_table(range(61)), requests, DEVICES)
                       for rows in (True, False))
    assert len(steps(False)) == len(steps(True)) - 8
    assert present.found and present.start_s == 2.25
    assert present == absent


def test_a_table_without_a_column_is_refused_naming_it():
    steps, batches, requests = ramp_run()
    with pytest.raises(ValueError, match="the steps table lacks the column.s. running"):
        steady_state(steps.drop(columns="running"), batches, requests, DEVICES)


LOADS = {"open loop": ["trace.generate.rate=40"],
         "closed loop": ["load.mode=concurrency", "load.concurrency=32"]}


@pytest.fixture(scope="module", params=list(LOADS))
def modeled_run(request, tmp_path_factory):
    """A modeled run of 300 requests that fill the deployment (KV for about 100)."""
    return modeled_runs(tmp_path_factory.mktemp("run"), "trace.generate.requests=300",
                        "trace.generate.output={uniform: [50, 150]}",
                        "trace.generate.prompt={uniform: [100, 400]}",
                        "engine.num_kv_blocks=2048", *LOADS[request.param])[-1]


def test_a_modeled_run_has_a_window_at_least_as_fast_as_the_whole_run(modeled_run):
    run = Run.read(modeled_run)
    s = of_run(run)
    assert s.found, s.reason
    figures = [s.output_tokens_per_s_per_device, s.total_tokens_per_s_per_device,
               s.requests_per_s, s.tokens_per_s_per_user, s.tpot_p50_s, s.ttft_p90_s]
    assert all(math.isfinite(f) and f > 0 for f in figures)
    whole = run.value("throughput.output_tokens") / run.devices
    assert s.output_tokens_per_s_per_device >= whole
    # the window's tokens are some of the run's
    assert s.output_tokens_per_s_per_device * s.length_s * run.devices <= \
        run.value("tokens.output")
    assert s.total_tokens_per_s_per_device > s.output_tokens_per_s_per_device
    assert s.tpot_p50_s <= s.tpot_p90_s and s.ttft_p50_s <= s.ttft_p90_s


def test_a_run_whose_batches_lack_a_column_is_refused_naming_the_file(modeled_run, tmp_path):
    copy = tmp_path / modeled_run.name
    shutil.copytree(modeled_run, copy)
    table = copy / "batches.parquet"
    pq.write_table(pq.read_table(table).drop_columns(["kind"]), table)
    with pytest.raises(BadInput, match=rf"{re.escape(str(table))}: no column\(s\) kind"):
        of_run(Run.read(copy))


def test_the_thresholds_are_the_ones_docs_frontier_md_states():
    text = (REPO / "docs" / "frontier.md").read_text()
    for name in ("LEVEL_FROM", "LEVEL_QUANTILE", "FILL_FRACTION", "MIN_STEPS", "MIN_SPAN_SHARE",
                 "RISE_TOLERANCE", "RISE_SLACK"):
        stated = re.search(rf"`{name}` = ([\d.]+)", text)
        assert stated, f"docs/frontier.md does not state {name}"
        assert float(stated.group(1)) == getattr(ss, name), name
