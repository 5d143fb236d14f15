"""Latency and throughput metrics (harness/record/metrics.py) on hand-computed cases.

Times are multiples of 1/4 s, so most arithmetic is exact in binary floating point and
the expected values below are compared with ==, except where a comment says otherwise.
"""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from harness.record.metrics import (
    SUMMARY_COLUMNS,
    describe,
    itl,
    measured_window,
    meets_slo,
    per_request,
    summarize,
    summary,
    token_bounds,
)
from harness.record.step_summary import engine_summary

NAN = float("nan")


def make_run(*specs):
    """(arrival, enqueue, first_scheduled, prompt_len, status, token times) per request ->
    (requests DataFrame, token_times, token_offsets), output_tokens = len(token times)."""
    cols = ["arrival_s", "enqueue_s", "first_scheduled_s", "prompt_len", "status"]
    requests = pd.DataFrame([s[:5] for s in specs], columns=cols)
    tokens = [np.asarray(s[5], dtype=np.float64) for s in specs]
    requests["output_tokens"] = np.array([len(t) for t in tokens], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])]).astype(np.int64)
    times = np.concatenate(tokens) if tokens else np.zeros(0)
    return requests, times, offsets


# The worked run. Token times are commit times on the run's clock.
#   R0 finished: arrives 0.0, enqueued on time, scheduled 0.25, tokens 1.0 1.5 2.5
#   R1 finished: arrives 1.0, enqueued late at 1.5, scheduled 2.0, one token at 3.0
#   R2 finished with MTP: arrives 2.0, tokens 2.5 3.0 3.0 3.5 3.5 (pairs committed at once)
#   R3 rejected: arrives 3.0, never scheduled, no tokens
#   R4 unfinished: arrives 3.5, scheduled 3.75, tokens 4.0 5.0, then the run ended
# The flat array is [1.0 1.5 2.5 | 3.0 | 2.5 3.0 3.0 3.5 3.5 | 4.0 5.0]; its diffs that
# cross requests (+0.5, -0.5, +0.5) must never show up as gaps.
RUN = (
    (0.0, 0.0, 0.25, 4, "finished", [1.0, 1.5, 2.5]),
    (1.0, 1.5, 2.0, 8, "finished", [3.0]),
    (2.0, 2.0, 2.0, 2, "finished", [2.5, 3.0, 3.0, 3.5, 3.5]),
    (3.0, 3.0, NAN, 100, "rejected", []),
    (3.5, 3.5, 3.75, 4, "unfinished", [4.0, 5.0]),
)


@pytest.fixture
def run():
    return make_run(*RUN)


def stats(table, metric):
    return table[table.metric == metric].set_index("stat")["value"].to_dict()


def nan_equal(a, b):
    np.testing.assert_array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


def test_per_request_latencies(run):
    req = per_request(*run)
    # TTFT = first token - arrival:  R0 1.0-0.0   R1 3.0-1.0   R2 2.5-2.0   R4 4.0-3.5
    nan_equal(req.ttft_s, [1.0, 2.0, 0.5, NAN, 0.5])
    # E2E = last token - arrival:    R0 2.5-0.0   R1 3.0-1.0   R2 3.5-2.0   R4 5.0-3.5
    nan_equal(req.e2e_s, [2.5, 2.0, 1.5, NAN, 1.5])
    # TPOT = (E2E - TTFT) / (output_tokens - 1): R0 (2.5-1.0)/2  R1 one token: NaN
    #        R2 (1.5-0.5)/4  R3 no token: NaN  R4 (1.5-0.5)/1
    nan_equal(req.tpot_s, [0.75, NAN, 0.25, NAN, 1.0])
    # queueing delay = first scheduled - arrival: 0.25-0, 2.0-1.0, 2.0-2.0, never, 3.75-3.5
    nan_equal(req.queueing_delay_s, [0.25, 1.0, 0.0, NAN, 0.25])
    # schedule fidelity = actual - intended enqueue: R1 was enqueued 1.5 - 1.0 late
    nan_equal(req.schedule_fidelity_s, [0.0, 0.5, 0.0, 0.0, 0.0])
    # the input columns pass through unchanged
    assert list(req.status) == ["finished"] * 3 + ["rejected", "unfinished"]


def test_one_token_request_has_no_tpot_and_no_itl():
    reqs, times, offs = make_run((0.0, 0.0, 0.0, 16, "finished", [0.75]))
    req = per_request(reqs, times, offs)
    assert req.ttft_s[0] == 0.75 and req.e2e_s[0] == 0.75  # first token is the last
    assert np.isnan(req.tpot_s[0])                          # (E2E - TTFT) / 0 undefined
    gaps, owner = itl(times, offs)
    assert len(gaps) == 0 and len(owner) == 0
    assert stats(summary(reqs, times, offs), "itl")["count"] == 0


def test_itl_gaps_per_request(run):
    gaps, owner = itl(run[1], run[2])
    # R0: 1.5-1.0, 2.5-1.5;  R2: 3.0-2.5, 3.0-3.0, 3.5-3.0, 3.5-3.5;  R4: 5.0-4.0
    nan_equal(gaps, [0.5, 1.0, 0.5, 0.0, 0.5, 0.0, 1.0])
    nan_equal(owner, [0, 0, 2, 2, 2, 2, 4])
    # keep selects whose gaps count: the finished requests only
    gaps, owner = itl(run[1], run[2], keep=[True, True, True, False, False])
    nan_equal(gaps, [0.5, 1.0, 0.5, 0.0, 0.5, 0.0])


def test_mtp_zero_gaps_are_samples():
    # 4 tokens, two committed per step at 1.0 and 1.5: gaps 0, 0.5, 0 are all samples
    reqs, times, offs = make_run((0.0, 0.0, 0.0, 8, "finished", [1.0, 1.0, 1.5, 1.5]))
    gaps, _ = itl(times, offs)
    nan_equal(gaps, [0.0, 0.5, 0.0])
    # TPOT = (1.5 - 1.0) / 3 = 1/6 = mean of the three gaps; dropping the zeros would
    # give 0.5, three times TPOT (the vllm #6531 disagreement, the other way round)
    tpot = per_request(reqs, times, offs).tpot_s[0]
    assert tpot == pytest.approx(1 / 6, rel=1e-15) and gaps.mean() == pytest.approx(tpot)
    s = stats(summary(reqs, times, offs), "itl")
    assert s["count"] == 3 and s["min"] == 0.0 and s["p50"] == 0.0


def test_itl_never_includes_ttft():
    # vllm #7242: ITL included the arrival -> first token wait. TTFT here is 10 s.
    reqs, times, offs = make_run((0.0, 0.0, 9.0, 8, "finished", [10.0, 10.25, 10.5]),
                                 (0.0, 0.0, 9.0, 8, "finished", [20.0, 20.25]))
    gaps, _ = itl(times, offs)
    nan_equal(gaps, [0.25, 0.25, 0.25])  # neither 10.0 (TTFT) nor 9.5 (crossing R0 -> R1)
    s = stats(summary(reqs, times, offs), "itl")
    assert s["max"] == 0.25 and s["count"] == 3


def test_mean_itl_equals_tpot_per_request(run):
    # Proof: the gaps of one request telescope, sum = last - first, and there are
    # output_tokens - 1 of them, so mean ITL = (last - first) / (L - 1); TPOT =
    # ((last - a) - (first - a)) / (L - 1), the same number. Exact on this run's times.
    req = per_request(*run)
    gaps, owner = itl(run[1], run[2])
    n = np.bincount(owner, minlength=len(req))
    with np.errstate(invalid="ignore"):
        mean_itl = np.bincount(owner, weights=gaps, minlength=len(req)) / n
    nan_equal(mean_itl, req.tpot_s)  # NaN where there is no gap: R1, R3


def test_mean_itl_equals_tpot_random():
    # Random runs, MTP ties and empty requests included; float rounding differs between
    # the two formulas, hence rel 1e-9 rather than ==.
    rng = np.random.default_rng(7)
    n = 500
    lens = rng.integers(0, 40, n)
    steps = rng.exponential(0.02, lens.sum()) * (rng.random(lens.sum()) < 0.7)  # 30% ties
    arrival = np.sort(rng.uniform(0, 50, n))
    offs = np.concatenate([[0], np.cumsum(lens)])
    times = np.concatenate([a + rng.exponential(0.3) + np.cumsum(steps[o:o + k])
                            for a, o, k in zip(arrival, offs[:-1], lens)])
    reqs = pd.DataFrame(dict(arrival_s=arrival, enqueue_s=arrival, first_scheduled_s=arrival,
                             prompt_len=8, output_tokens=lens,
                             status=np.where(lens > 0, "finished", "rejected")))
    req = per_request(reqs, times, offs)
    gaps, owner = itl(times, offs)
    # against a plain loop over requests
    ref = [np.diff(times[offs[i]:offs[i + 1]]) for i in range(n)]
    nan_equal(gaps, np.concatenate(ref))
    many = lens > 1
    mean_itl = np.bincount(owner, weights=gaps, minlength=n)[many] / (lens[many] - 1)
    np.testing.assert_allclose(mean_itl, req.tpot_s[many], rtol=1e-9)
    assert req.tpot_s[~many].isna().all()


def test_run_mean_itl_is_token_weighted_mean_tpot(run):
    # Over the run, mean ITL weights each request's TPOT by its L - 1 gaps; mean TPOT
    # weights requests equally. Finished: R0 TPOT 0.75 (2 gaps), R2 0.25 (4 gaps).
    #   mean TPOT = (0.75 + 0.25) / 2 = 0.5
    #   mean ITL  = (0.5 + 1.0 + 0.5 + 0 + 0.5 + 0) / 6 = 2.5 / 6 = (2*0.75 + 4*0.25) / 6
    # so here ITL < TPOT without any bug (the pattern reported in vllm #6531).
    s = summary(*run)
    assert stats(s, "tpot")["mean"] == 0.5
    assert stats(s, "itl")["mean"] == pytest.approx(2.5 / 6, rel=1e-15)


def test_run_throughput_and_window(run):
    s = summary(*run)
    # window: first measured arrival 0.0 to the last token of any status, R4's 5.0
    assert stats(s, "window") == {"duration": 5.0}
    t = stats(s, "throughput")
    assert t["requests"] == 3 / 5          # R0, R1, R2 completed
    assert t["output_tokens"] == 9 / 5     # 3 + 1 + 5 tokens; R4's 2 are not counted
    assert t["total_tokens"] == 23 / 5     # prompts 4 + 8 + 2 = 14, plus 9
    assert stats(s, "requests") == {"finished": 3, "handed_off": 0, "rejected": 1,
                                    "unfinished": 1, "warmup": 0}


def test_latency_stats_exclude_rejected_and_unfinished(run):
    s = summary(*run)
    # TTFT of R0, R1, R2 = [1.0, 2.0, 0.5]; R4's 0.5 is left out. Sorted 0.5 1.0 2.0;
    # linear percentile at rank p/100 * (3 - 1): p90 -> 1.8 -> 1.0 + 0.8 * (2.0 - 1.0)
    assert stats(s, "ttft") == pytest.approx(dict(
        count=3, mean=3.5 / 3, min=0.5, p50=1.0, p90=1.8, p95=1.9, p99=1.98, max=2.0),
        rel=1e-15)
    # TPOT of R0, R2 = [0.75, 0.25] (R1's NaN dropped): p90 rank 0.9 -> 0.25 + 0.9 * 0.5
    assert stats(s, "tpot") == pytest.approx(dict(
        count=2, mean=0.5, min=0.25, p50=0.5, p90=0.7, p95=0.725, p99=0.745, max=0.75),
        rel=1e-15)
    # ITL over all 6 gaps of R0 and R2, sorted 0 0 0.5 0.5 0.5 1.0; rank p/100 * 5:
    # p50 2.5 -> 0.5, p90 4.5 -> 0.5 + 0.5 * 0.5, p95 4.75 -> 0.875, p99 4.95 -> 0.975
    assert stats(s, "itl") == pytest.approx(dict(
        count=6, mean=2.5 / 6, min=0.0, p50=0.5, p90=0.75, p95=0.875, p99=0.975, max=1.0),
        rel=1e-15)
    # E2E [2.5, 2.0, 1.5]: p90 rank 1.8 -> 2.0 + 0.8 * 0.5
    assert stats(s, "e2e") == pytest.approx(dict(
        count=3, mean=2.0, min=1.5, p50=2.0, p90=2.4, p95=2.45, p99=2.49, max=2.5),
        rel=1e-15)
    # queueing delay [0.25, 1.0, 0.0]: sorted 0 0.25 1.0, p90 -> 0.25 + 0.8 * 0.75
    assert stats(s, "queueing_delay") == pytest.approx(dict(
        count=3, mean=1.25 / 3, min=0.0, p50=0.25, p90=0.85, p95=0.925, p99=0.985, max=1.0),
        rel=1e-15)


def test_decode_stall_share_and_distribution(run):
    """docs/metrics.md, "Decode stall": over the completed measured requests R0, R1, R2
    (spans 1.5, 0, 1.0), stalls 0.5, 0, 0.25 (R4's, unfinished, left out): share
    0.75 / 2.5, and their distribution."""
    requests, times, offsets = run
    req = per_request(requests, times, offsets)
    req["decode_stall_s"] = [0.5, 0.0, 0.25, 0.0, 9.0]
    s = summarize(req, [])
    assert stats(s, "decode_stall") == pytest.approx(dict(
        count=3, mean=0.25, min=0.0, p50=0.25, p90=0.45, p95=0.475, p99=0.495, max=0.5,
        share=0.3), rel=1e-15)
    assert set(s[s.metric == "decode_stall"].unit) == {"samples", "s", "fraction"}
    assert "decode_stall" not in set(summary(*run).metric)  # token times alone: no stalls


def test_schedule_fidelity_over_all_measured_requests(run):
    # load delivery concerns rejected and unfinished requests too: 5 samples [0 .5 0 0 0]
    # sorted 0 0 0 0 0.5, rank p/100 * 4: p90 3.6 -> 0.6 * 0.5, p99 3.96 -> 0.96 * 0.5
    s = stats(summary(*run), "schedule_fidelity")
    assert s == pytest.approx(dict(count=5, mean=0.1, min=0.0, p50=0.0, p90=0.3, p95=0.4,
                                   p99=0.48, max=0.5), rel=1e-15)


def test_queueing_delay_counts_client_side_lateness(run):
    # measured from the intended time: R1's 1.0 s = 0.5 s late enqueue + 0.5 s in queue
    req = per_request(*run)
    assert req.queueing_delay_s[1] == req.schedule_fidelity_s[1] + (2.0 - 1.5)
    assert req.ttft_s[1] == 3.0 - 1.0  # not 3.0 - 1.5: the late enqueue is not hidden


def test_warmup_excluded(run):
    # R0 is warm-up: window from R1's arrival 1.0 to 5.0 = 4.0; completed R1, R2
    s = summary(*run, warmup=[True, False, False, False, False])
    assert stats(s, "window")["duration"] == 4.0
    t = stats(s, "throughput")
    assert t["requests"] == 2 / 4 and t["output_tokens"] == 6 / 4 and t["total_tokens"] == 16 / 4
    assert stats(s, "requests") == {"finished": 2, "handed_off": 0, "rejected": 1,
                                    "unfinished": 1, "warmup": 1}
    assert stats(s, "ttft")["count"] == 2 and stats(s, "ttft")["max"] == 2.0  # [2.0, 0.5]
    assert stats(s, "itl")["count"] == 4  # R2's gaps only
    assert stats(s, "schedule_fidelity")["count"] == 4


@pytest.mark.parametrize("slo, good", [
    (dict(ttft=1.0), 2),               # R0 (1.0, the limit is inclusive), R2 (0.5)
    (dict(tpot=0.8), 3),               # R0 0.75, R1 (one token: no TPOT to miss), R2 0.25
    (dict(tpot=0.5), 2),               # R1, R2; R0's 0.75 misses
    (dict(e2e=2.0), 2),                # R1 2.0, R2 1.5; R0's 2.5 misses
    (dict(ttft=1.0, tpot=0.8), 2),     # {R0, R2} & {R0, R1, R2}
    (dict(ttft=1.0, e2e=2.0), 1),      # {R0, R2} & {R1, R2} = {R2}
    (dict(ttft=1.0, tpot=0.8, e2e=2.0), 1),
    (dict(ttft=0.25), 0),
])
def test_goodput(run, slo, good):
    # R4 (unfinished: TTFT 0.5, E2E 1.5) and R3 (rejected) never count; window 5.0 s
    s = summary(*run, slo=slo)
    assert stats(s, "goodput") == {"requests": good / 5, "attainment": good / 5}  # 5 measured
    assert stats(s, "slo") == slo


def test_attainment_is_the_share_of_measured_requests_that_are_good(run):
    # R0 in warm-up: left out of both counts. Of R1 .. R4 (measured), TTFT <= 1.0 holds for
    # R2 only (R1 2.0; R3 rejected and R4 unfinished are never good): 1 of 4
    s = summary(*run, warmup=[True, False, False, False, False], slo=dict(ttft=1.0))
    assert stats(s, "goodput")["attainment"] == 1 / 4
    assert "attainment" not in stats(summary(*run), "goodput")  # no SLO, no goodput rows


def test_meets_slo_nan_rules():
    nan_equal(meets_slo([0.5, NAN], [NAN, NAN], [1.0, NAN], dict(tpot=0.1)), [True, True])
    nan_equal(meets_slo([0.5, NAN], [NAN, NAN], [1.0, NAN], dict(ttft=1.0)), [True, False])
    nan_equal(meets_slo([0.5, NAN], [NAN, NAN], [1.0, NAN], dict(e2e=1.0)), [True, False])
    with pytest.raises(ValueError, match="unknown SLO"):
        meets_slo([0.5], [0.1], [1.0], dict(itl=0.1))


def test_percentiles_on_a_known_array():
    # numpy 'linear': rank p/100 * (n - 1), interpolated. [1 2 3 4], n - 1 = 3:
    # p50 rank 1.5 -> 2.5 (the mean of the middle two; cf. vllm #6064), p90 2.7 -> 3.7,
    # p95 2.85 -> 3.85, p99 2.97 -> 3.97. NaN values are dropped first.
    d = describe([4.0, NAN, 1.0, 3.0, 2.0])
    assert d == pytest.approx(dict(count=4, mean=2.5, min=1.0, p50=2.5, p90=3.7, p95=3.85,
                                   p99=3.97, max=4.0), rel=1e-15)
    assert [d[f"p{p}"] for p in (50, 90, 95, 99)] == list(
        np.percentile([1.0, 2.0, 3.0, 4.0], [50, 90, 95, 99], method="linear"))
    empty = describe([NAN])
    assert empty["count"] == 0 and all(np.isnan(v) for k, v in empty.items() if k != "count")


def test_summary_is_tidy(run):
    s = summary(*run, slo=dict(ttft=1.0))
    assert tuple(s.columns) == SUMMARY_COLUMNS
    assert not s.duplicated(["metric", "stat"]).any()
    assert s["value"].dtype == np.float64
    row = s[(s.metric == "ttft") & (s.stat == "p99")].iloc[0]
    assert (row.value, row.unit) == (pytest.approx(1.98), "s")
    units = s.groupby("metric")["unit"].agg(set).to_dict()
    assert units["throughput"] == {"req/s", "tok/s"} and units["itl"] == {"s", "samples"}
    labelled = pd.concat([s.assign(run_id="a"), s.assign(run_id="b")])
    assert len(labelled) == 2 * len(s)


def test_handed_off_counts_as_completed():
    # a prompt engine: one token each, then handed to a decode engine
    reqs, times, offs = make_run((0.0, 0.0, 0.0, 8, "handed_off", [0.5]),
                                 (0.5, 0.5, 0.5, 8, "handed_off", [1.0]))
    s = summary(reqs, times, offs)
    assert stats(s, "requests")["handed_off"] == 2
    assert stats(s, "throughput")["requests"] == 2 / 1.0  # window 0.0 -> 1.0
    assert stats(s, "ttft")["mean"] == 0.5 and stats(s, "tpot")["count"] == 0


def test_no_measured_tokens():
    reqs, times, offs = make_run((0.0, 0.0, NAN, 8, "rejected", []))
    s = summary(reqs, times, offs, slo=dict(ttft=1.0))
    assert np.isnan(stats(s, "window")["duration"])
    assert all(np.isnan(v) for v in stats(s, "throughput").values())
    assert np.isnan(stats(s, "goodput")["requests"])
    assert stats(s, "ttft")["count"] == 0 and stats(s, "requests")["rejected"] == 1
    assert np.isnan(measured_window([0.0], [NAN], [True]))


def test_token_bounds_with_empty_requests():
    # empty requests first, in the middle and last: [] [1 2] [] [3] []
    first, last = token_bounds([1.0, 2.0, 3.0], [0, 0, 2, 2, 3, 3])
    nan_equal(first, [NAN, 1.0, NAN, 3.0, NAN])
    nan_equal(last, [NAN, 2.0, NAN, 3.0, NAN])


@pytest.mark.parametrize("times, offsets, message", [
    ([1.0, 2.0], [0, 1], "1-D with 3 entries"),
    ([1.0, 2.0], [0, 1, 1], "rise from 0"),
    ([1.0, 2.0], [1, 1, 2], "rise from 0"),
    ([1.0, NAN], [0, 1, 2], "NaN"),
    ([2.0, 1.0], [0, 2, 2], r"request 0: token times go backwards \(\[2.0, 1.0\]\)"),
])
def test_bad_tokens(times, offsets, message):
    reqs = pd.DataFrame(dict(arrival_s=[0.0, 0.0], enqueue_s=0.0, first_scheduled_s=0.0,
                             prompt_len=1, output_tokens=[1, 1], status="finished"))
    with pytest.raises(ValueError, match=message):
        per_request(reqs, times, offsets)


def test_bad_requests(run):
    reqs, times, offs = run
    with pytest.raises(ValueError, match="request 0: output_tokens 4 but 3 token times"):
        per_request(reqs.assign(output_tokens=[4, 1, 5, 0, 2]), times, offs)
    with pytest.raises(ValueError, match="request 1: arrival_s is nan"):
        per_request(reqs.assign(arrival_s=[0.0, NAN, 2.0, 3.0, 3.5]), times, offs)
    with pytest.raises(ValueError, match="unknown status"):
        per_request(reqs.assign(status="done"), times, offs)
    with pytest.raises(ValueError, match="lacks the columns"):
        per_request(reqs.drop(columns="enqueue_s"), times, offs)
    with pytest.raises(ValueError, match="warmup must be a boolean mask of 5"):
        summary(reqs, times, offs, warmup=[True])


@given(st.lists(st.tuples(st.floats(-1e3, 1e3, allow_nan=False), st.integers(0, 50)),
                min_size=1, max_size=30))
@settings(max_examples=300, deadline=None)
def test_counted_values_describe_like_repeated_ones(pairs):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs])
    got, want = describe(values, counts), describe(np.repeat(values, counts))
    assert got.keys() == want.keys() and got["count"] == want["count"]
    for stat in got:
        assert got[stat] == pytest.approx(want[stat], rel=1e-12, abs=1e-9, nan_ok=True)


def test_counted_percentiles_by_hand():
    # 1 x3, 10 x1: the samples 1 1 1 10; p50 at rank 1.5 -> 1; p90 at rank 2.7 -> 1 + 0.7*9
    d = describe([10.0, 1.0], [1, 3])
    assert (d["count"], d["mean"], d["p50"], d["p90"]) == (4, 13 / 4, 1.0, pytest.approx(7.3))


def test_achieved_tflops_and_mfu_by_hand():
    # 2 DP ranks; measured steps 1 and 2 (step 0 is warm-up). Model FLOPs over both ranks:
    # step 1: 3e12 + 1e12, step 2: 2e12 + 2e12 -> 8e12 over forward 0.5 s + 1.5 s = 2 s,
    # per device: 8e12 / 2 s / 2 = 2 TFLOP/s; against a 10 TFLOP/s peak, MFU 0.2.
    steps = pd.DataFrame(dict(
        step=[0, 0, 1, 1, 2, 2], dp_rank=[0, 1] * 3, warmup=[True, True] + [False] * 4,
        forward_ns=[9e9, 9e9, 0.5e9, 0.5e9, 1.5e9, 1.5e9], model_flops=[9e15, 9e15, 3e12, 1e12,
                                                                          2e12, 2e12],
        sched_call_ns=[1e3] * 6, sched_cpp_ns=[1e3] * 6, step_ns=[1e3] * 6,
        t_start_s=[0.0] * 6, t_end_s=[1.0] * 6, phase=["prompt"] * 6, tokens_q=[1] * 6,
        prefix_hit_tokens=[0] * 6, kv_blocks_evicted=[0] * 6))
    stats = engine_summary(steps, peak_tflops=10.0).set_index(["metric", "stat"])["value"]
    assert stats[("achieved", "tflops_per_device")] == pytest.approx(2.0, rel=1e-12)
    assert stats[("mfu", "model")] == pytest.approx(0.2, rel=1e-12)
    assert stats[("forward", "mean")] == pytest.approx(1e6)  # us: the warm-up step left out


def test_modeled_step_parts_by_hand():
    # 2 DP ranks; measured steps 1, 2 and 3 (step 0 is warm-up). Each step's dispatch is its
    # slowest rank's: max(1, 3) = 3, max(5, 2) = 5, max(0, 4) = 4 us -> p50 4, max 5; parts
    # that are zero on every step still get rows, since the run has a deployment.
    us = 1e-6
    steps = pd.DataFrame(dict(
        step=[0, 0, 1, 1, 2, 2, 3, 3], dp_rank=[0, 1] * 4, warmup=[True] * 2 + [False] * 6,
        dispatch_s=[us * v for v in (99, 99, 1, 3, 5, 2, 0, 4)], combine_s=[0.0] * 8,
        forward_ns=[1e3] * 8, model_flops=[1.0] * 8, sched_call_ns=[1e3] * 8,
        sched_cpp_ns=[1e3] * 8, step_ns=[1e3] * 8, t_start_s=[0.0] * 8, t_end_s=[1.0] * 8,
        phase=["decode"] * 8, tokens_q=[1] * 8, prefix_hit_tokens=[0] * 8,
        kv_blocks_evicted=[0] * 8))
    stats = engine_summary(steps, None).set_index(["metric", "stat"])["value"]
    assert (stats[("dispatch", "count")], stats[("dispatch", "p50")],
            stats[("dispatch", "max")]) == (3, pytest.approx(4.0), pytest.approx(5.0))
    assert stats[("combine", "max")] == 0.0


def test_a_run_without_a_deployment_has_no_step_parts():
    steps = pd.DataFrame(dict(
        step=[0, 1], dp_rank=[0, 0], warmup=[False, False], dispatch_s=[0.0, 0.0],
        forward_ns=[1e3] * 2, model_flops=[1.0] * 2, sched_call_ns=[1e3] * 2,
        sched_cpp_ns=[1e3] * 2, step_ns=[1e3] * 2, t_start_s=[0.0] * 2, t_end_s=[1.0] * 2,
        phase=["decode"] * 2, tokens_q=[1] * 2, prefix_hit_tokens=[0] * 2,
        kv_blocks_evicted=[0] * 2))
    assert "dispatch" not in set(engine_summary(steps, None)["metric"])


def test_prefix_cache_hit_rate_by_hand():
    # Measured steps 1 (prompt: 30 + 10 tokens computed, 40 + 20 hit, 3 evicted) and 2
    # (decode: its 8 tokens are no prompt tokens); step 0 is warm-up. Hit rate:
    # 60 / (60 + 40) = 0.6.
    steps = pd.DataFrame(dict(
        step=[0, 0, 1, 1, 2, 2], dp_rank=[0, 1] * 3, warmup=[True, True] + [False] * 4,
        phase=["prompt"] * 4 + ["decode"] * 2, tokens_q=[99, 99, 30, 10, 4, 4],
        prefix_hit_tokens=[99, 99, 40, 20, 0, 0], kv_blocks_evicted=[9, 9, 1, 2, 0, 0],
        forward_ns=[1e3] * 6, model_flops=[1.0] * 6, sched_call_ns=[1e3] * 6,
        sched_cpp_ns=[1e3] * 6, step_ns=[1e3] * 6, t_start_s=[0.0] * 6, t_end_s=[1.0] * 6))
    stats = engine_summary(steps, None).set_index(["metric", "stat"])["value"]
    assert stats[("prefix_cache", "hit_rate")] == pytest.approx(0.6, rel=1e-12)
    assert (stats[("prefix_cache", "hit_tokens")], stats[("prefix_cache", "evicted_blocks")]) \
        == (60, 3)


def test_a_mixed_rounds_decode_rows_are_no_prefill_work():
    # Step 0 (mixed, phase prompt): 24 tokens, of which 20 prefill and 4 decode rows; 60
    # hit. Hit rate 60 / (60 + 20) = 0.75, not 60 / (60 + 24).
    steps = pd.DataFrame(dict(
        step=[0], dp_rank=[0], warmup=[False], phase=["prompt"], tokens_q=[24],
        prefill_tokens_q=[20], prefix_hit_tokens=[60], kv_blocks_evicted=[0],
        forward_ns=[1e3], model_flops=[1.0], sched_call_ns=[1e3], sched_cpp_ns=[1e3],
        step_ns=[1e3], t_start_s=[0.0], t_end_s=[1.0]))
    stats = engine_summary(steps, None).set_index(["metric", "stat"])["value"]
    assert stats[("prefix_cache", "hit_rate")] == pytest.approx(0.75, rel=1e-12)


def test_a_steps_table_from_before_prefix_caching_has_no_cache_figures():
    steps = pd.DataFrame(dict(
        step=[0, 1], dp_rank=[0, 0], warmup=[False, False], phase=["prompt", "decode"],
        tokens_q=[5, 1], forward_ns=[1e3] * 2, model_flops=[1.0] * 2, sched_call_ns=[1e3] * 2,
        sched_cpp_ns=[1e3] * 2, step_ns=[1e3] * 2, t_start_s=[0.0] * 2, t_end_s=[1.0] * 2))
    stats = engine_summary(steps, None).set_index(["metric", "stat"])["value"]
    assert stats["prefix_cache"].isna().all() and len(stats["prefix_cache"]) == 3
