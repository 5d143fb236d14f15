"""The counting of tests/bench/history_power.py on synthetic series: the injected step, the
false alarms of `history detect` replayed push by push and of the gate's rule, and how
fast and where a step is found."""

import numpy as np
import pytest

from harness.analysis import change_points
from tests.bench import history_power as power
from tests.test_history import needs_otava


def test_a_step_is_injected_in_the_bad_direction_from_its_commit_on():
    values = np.array([100.0, 100.0, 100.0, 100.0])
    assert list(power.worse(values, "higher", 2, 0.25)) == [100, 100, 80, 80]
    assert list(power.worse(values, "lower", 1, 0.05)) == [100, 105, 105, 105]
    assert list(values) == [100] * 4  # the real series is left as it was


def test_the_gate_judges_each_run_against_the_baseline_run_or_its_predecessor():
    values = np.array([1.00, 1.04, 0.96, 1.06, 1.00])  # a latency: higher is worse
    baseline = power.gate_fails(values, "tpot.p50", "lower", "baseline", 0.05)
    assert list(baseline) == [False, False, True, False]  # 1.06 / 1.00 only
    predecessor = power.gate_fails(values, "tpot.p50", "lower", "predecessor", 0.05)
    assert list(predecessor) == [False, False, True, False]  # 1.06 / 0.96; 1.00 / 1.06 is better
    assert power.false_alarms_gate(baseline) == 25.0
    throughput = power.gate_fails(np.array([100.0, 94.0, 96.0]), "throughput.output_tokens",
                                  "higher", "baseline", 0.05)
    assert list(throughput) == [True, False]


def test_a_gate_finds_a_step_only_at_a_commit_near_it():
    fails = power.gate_fails(power.worse(np.ones(12), "lower", 6, 0.10), "ttft.p99", "lower",
                             "baseline", 0.05)
    found = power.found_by_gate(fails, 6)
    assert (found.delay, found.at) == (0, 1.0)
    late = np.zeros(11, dtype=bool)
    late[6 + power.TOLERANCE] = True  # commit 7 + TOLERANCE: too late to blame the change
    assert power.found_by_gate(late, 6).delay is None


def test_a_regression_the_unchanged_history_names_is_not_the_step():
    assert power.found_by_detect({6: {5}}, 6, {6: {5}}).delay is None
    found = power.found_by_detect({6: {5}, 7: {5, 6}}, 6, {6: {5}, 7: {5}})
    assert (found.delay, found.at) == (1, 0)
    assert power.found_by_detect({8: {6 + power.TOLERANCE + 1}}, 6, {}).delay is None
    assert power.false_alarms_detect({2: set(), 3: {2}, 4: {2}, 5: {2, 4}}) == 50.0


@needs_otava
def test_detect_replayed_push_by_push_finds_a_step_and_not_a_flat_series():
    rng = np.random.default_rng(3)
    flat = 1 + 0.01 * rng.standard_normal(30)
    gpu = dict(device="NVIDIA H100 80GB HBM3", backend="cuda")  # the device floor
    unchanged = power.detect_pushes(power.series_table(flat, "ttft.p99", "s", **gpu))
    assert sorted(unchanged) == list(range(power.FIRST_PUSH, 30))
    assert power.false_alarms_detect(unchanged) == 0.0
    stepped = power.worse(flat, "lower", 15, 0.10)
    pushes = power.detect_pushes(power.series_table(stepped, "ttft.p99", "s", **gpu), first=15)
    found = power.found_by_detect(pushes, 15, unchanged)
    assert found.at == 0 and found.delay is not None and 0 <= found.delay <= 5
    assert all(15 in named for j, named in pushes.items() if j >= 15 + found.delay)


@pytest.mark.parametrize("metric,better_way", [
    ("throughput.output_tokens", "higher"),  # the CPU device: timed by the host
    ("sched_call.p50", "lower"),
])
def test_the_named_commit_is_the_first_worse_one(metric, better_way):
    pytest.importorskip("otava")
    floors = change_points.noise_floors(["host=50%"])  # the host's: judged where set
    values = power.worse(np.full(20, 50.0) + np.tile([0.1, -0.1], 10), better_way, 12, 0.6)
    table = power.series_table(values, metric)
    assert power.found_by_detect(power.detect_pushes(table, 12, floors), 12, {}).at == 0
    assert power.detect_pushes(table, 12) == {j: set() for j in range(12, 20)}  # by default


@pytest.mark.slow  # three real-clock runs in a process of their own
def test_the_script_runs_its_runs_and_writes_its_table_and_stores(tmp_path, capsys,
                                                                  monkeypatch):
    pytest.importorskip("otava")
    # its trace cut to 8 requests arriving in half a second: what is counted needs runs,
    # not long ones; no warm-up steps, which on a slow host can take in all 8 requests and
    # leave a run nothing measured (no throughput to store)
    monkeypatch.setattr(power, "SETTINGS", tuple(
        s.replace("requests: 16, rate: 4,", "requests: 8, rate: 16,")
        .replace("warmup_steps=2", "warmup_steps=0") for s in power.SETTINGS))
    assert "requests: 8, rate: 16," in power.SETTINGS[0] and "warmup_steps=0" in power.SETTINGS
    assert power.main(["--runs", "3", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("history power: 3 runs of one build")
    for metric in power.METRICS:
        (at,) = [i for i, line in enumerate(lines) if line.startswith(metric)]
        methods = [line[26:50].strip() for line in lines[at + 1:at + 5]]
        assert methods == ["history detect", "gate 5% vs baseline", "gate 10% vs baseline",
                           "gate 10% vs predecessor"]
    from harness.analysis import history_store
    aa, stepped = history_store.read(tmp_path / "aa"), history_store.read(tmp_path / "stepped")
    assert sorted(aa["commit"].unique()) == ["c000", "c001", "c002"]
    key = ["commit", "metric", "stat"]
    both = aa.merge(stepped, on=key, suffixes=("", "_stepped"))
    worse = both[(both["commit"] == "c001") & (both["metric"] == "ttft")
                 & (both["stat"] == "p99")]  # INJECT_AT[1] of 3 commits: from c001 on
    assert (worse["value_stepped"] == worse["value"] * 1.10).all()
    assert len(both) == len(aa)
