"""steptrace compare on synthetic runs with a known effect: a 10 % shift is found, an A/A
split is not, and a comparison says what it compared and what it left out."""

import json

import numpy as np
import pytest

from harness.analysis.compare import Arm, arms_by, compare, metric_result
from harness.analysis.runs import load_runs
from harness.commands import main
from tests.helpers import synthetic_run

NOISE = 0.02  # each run's throughput and TTFT scatter by 2 % (standard deviation)
# a run's manifest: other processes held 60 % of the host, above the 10 % threshold
SHARE = dict(other_cpu_pct=60.0, steal_pct=5.0, threshold_pct=10.0, contaminated=True)


def make_arm(root, name, n, scale, rng, noise=NOISE, **kw):
    """n runs whose throughput is 100 * scale and TTFT p99 0.5 / scale, with noise."""
    out = []
    for i in range(n):
        jitter = rng.normal(1, noise, 2)
        out.append(synthetic_run(root / f"{name}-r{i}", {
            "throughput.output_tokens": (100 * scale * jitter[0], "tok/s"),
            "ttft.p99": (0.5 / scale * jitter[1], "s"),
            "requests.finished": (400, "requests")}, **kw))
    return out


def arms(tmp_path, n_a, n_b, scale_b, seed=0):
    rng = np.random.default_rng(seed)
    make_arm(tmp_path / "a", "a", n_a, 1.0, rng, gil_mode="held")
    make_arm(tmp_path / "b", "b", n_b, scale_b, rng, gil_mode="released")
    return (Arm("A", tuple(load_runs([tmp_path / "a"]))),
            Arm("B", tuple(load_runs([tmp_path / "b"]))))


def test_a_ten_percent_shift_is_found(tmp_path):
    result = compare(*arms(tmp_path, 6, 6, 1.10))
    tput, ttft = result.metric("throughput.output_tokens"), result.metric("ttft.p99")
    assert tput.verdict == "higher" and 1.05 < tput.ratio < 1.15
    assert 1 < tput.low < tput.ratio < tput.high
    assert ttft.verdict == "lower" and ttft.high < 1
    assert tput.noise_floor < 0.1  # each arm has >= 4 runs: a noise floor, below the effect
    assert "B higher by" in tput.says()
    assert result.differing_keys == {"gil_mode": (["held"], ["released"])}
    assert "requests.finished" not in [m.metric for m in result.metrics]  # a count


def test_modeled_runs_are_judged_from_one_run_each_except_the_hosts_timings(tmp_path):
    def run(name, tokens, sched_us):
        return synthetic_run(tmp_path / name, {"throughput.output_tokens": (tokens, "tok/s"),
                                               "ttft.p99": (0.5, "s"),
                                               "sched_call.p50": (sched_us, "us")},
                             modeled=True)

    a, b = run("a", 100.0, 5.0), run("b", 110.0, 6.0)
    result = compare(Arm("A", tuple(load_runs([a]))), Arm("B", tuple(load_runs([b]))))
    tput = result.metric("throughput.output_tokens")
    assert tput.verdict == "higher" and tput.low == tput.high == tput.ratio
    assert tput.says() == "B higher by 10.0% (deterministic: modeled runs)"
    assert result.metric("ttft.p99").says() == "equal (deterministic: modeled runs)"
    assert result.metric("sched_call.p50").verdict == "too few runs"  # measured on the host


def test_a_pd_runs_modeled_rows_and_its_pools_are_judged_from_one_run_each(tmp_path):
    """A P/D run's per-device, transfer and wait rows, and each pool's modeled rows under
    its name, come from the virtual clock too; its pools' host timings do not."""
    rows = {"per_device.total_tokens": "tok/s", "kv_transfer.p99": "s",
            "decode_wait.p99": "s", "decode_mfu.model": "fraction",
            "prefill0_prefix_cache.hit_rate": "fraction", "prefill_sched_call.p50": "us"}

    def run(name, scale):
        return synthetic_run(tmp_path / name, {n: (scale, u) for n, u in rows.items()},
                             modeled=True)

    a, b = run("a", 1.0), run("b", 1.2)
    result = compare(Arm("A", tuple(load_runs([a]))), Arm("B", tuple(load_runs([b]))))
    for name in list(rows)[:-1]:
        assert result.metric(name).says() == "B higher by 20.0% (deterministic: modeled runs)"
    assert result.metric("prefill_sched_call.p50").verdict == "too few runs"


@pytest.mark.parametrize("seed", range(5))
def test_an_aa_split_finds_no_difference(tmp_path, seed):
    result = compare(*arms(tmp_path, 6, 6, 1.0, seed))
    for m in result.metrics:
        assert m.verdict == "none", (m.metric, m.ratio, m.low, m.high, m.noise_floor)
        assert m.says().startswith("no detectable difference (noise floor ±")


def test_an_effect_inside_the_noise_floor_is_not_named(tmp_path):
    rng = np.random.default_rng(3)  # two noisy arms, 2 % apart: the A/A halves vary more
    make_arm(tmp_path / "a", "a", 8, 1.0, rng, noise=0.15)
    make_arm(tmp_path / "b", "b", 8, 1.02, rng, noise=0.15)
    result = compare(Arm("A", tuple(load_runs([tmp_path / "a"]))),
                     Arm("B", tuple(load_runs([tmp_path / "b"]))))
    m = result.metric("throughput.output_tokens")
    assert m.verdict == "none" and m.noise_floor > abs(m.ratio - 1)


def test_fewer_than_three_runs_give_no_interval(tmp_path):
    m = compare(*arms(tmp_path, 2, 6, 1.10)).metric("throughput.output_tokens")
    assert m.verdict == "too few runs" and np.isnan(m.low) and np.isnan(m.high)
    assert m.says() == "no interval: 2 run(s) in an arm, 3 needed"
    assert 1.05 < m.ratio < 1.15  # the medians and their ratio are still given


def test_by_a_label_over_a_sweep_folder(tmp_path):
    arms(tmp_path, 3, 3, 1.10)
    a, b = arms_by(load_runs([tmp_path]), "gil_mode")  # released first, as a sweep names them
    assert (a.name, len(a.runs), b.name, len(b.runs)) == ("gil_mode=released", 3,
                                                          "gil_mode=held", 3)


def test_runs_of_different_traces_are_refused_unless_allowed(tmp_path, capsys):
    rng = np.random.default_rng(0)
    make_arm(tmp_path / "a", "a", 3, 1.0, rng)
    make_arm(tmp_path / "b", "b", 3, 1.0, rng, trace_sha256="f" * 64)
    assert main(["compare", str(tmp_path / "a"), "--", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "different traces" in err and "trace_sha256" in err and "--allow-different" in err
    assert main(["compare", "--allow-different", str(tmp_path / "a"), "--",
                 str(tmp_path / "b")]) == 0


def test_incomplete_runs_are_left_out_and_busy_hosts_flagged(tmp_path):
    rng = np.random.default_rng(0)
    make_arm(tmp_path / "a", "a", 3, 1.0, rng)
    make_arm(tmp_path / "b", "b", 3, 1.0, rng)
    killed = synthetic_run(tmp_path / "b" / "killed", {"ttft.p99": (9.0, "s")}, complete=False)
    busy = synthetic_run(tmp_path / "b" / "busy", {"ttft.p99": (0.5, "s")},
                         host_share=SHARE)  # a measured run: its TTFT is the host's
    a, b = (Arm(n, tuple(load_runs([tmp_path / n.lower()]))) for n in "AB")
    result = compare(a, b)
    assert result.left_out == {str(killed): "killed, not complete"}
    assert list(result.busy_host) == [str(busy)]
    assert result.busy_host[str(busy)]["host_timed"] == ["ttft"]
    assert result.metric("ttft.p99").busy_runs == 1
    assert str(busy) in result.runs_b and len(result.runs_b) == 4
    assert str(busy) not in compare(a, b, drop_busy=True).runs_b
    assert str(killed) in compare(a, b, include_incomplete=True).runs_b


def test_cli_json_csv_and_text(tmp_path, capsys):
    arms(tmp_path, 4, 4, 1.10)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert main(["compare", "--json", a, "--", b]) == 0
    data = json.loads(capsys.readouterr().out)
    tput = next(m for m in data["metrics"] if m["metric"] == "throughput.output_tokens")
    assert tput["verdict"] == "higher" and tput["runs_a"] == tput["runs_b"] == 4
    assert data["differing_keys"] == {"gil_mode": {"a": ["held"], "b": ["released"]}}
    assert main(["compare", "--csv", "--by", "gil_mode", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("metric,unit,runs_a,runs_b,median_a,median_b,ratio,low,high")
    assert main(["compare", a, f"{tmp_path}/b/*"]) == 2  # no `--`: one arm
    assert "two arms needed" in capsys.readouterr().err
    assert main(["compare", a, "--", f"{tmp_path}/b/*"]) == 0
    out = capsys.readouterr().out
    assert "gil_mode: A held  B released" in out and "throughput.output_tokens" in out
    assert main(["compare", a, "--json", "--", b]) == 0  # options anywhere before B
    assert json.loads(capsys.readouterr().out) == data
    assert main(["compare", a, "--", b, "--json"]) == 0  # and after it
    assert json.loads(capsys.readouterr().out) == data


@pytest.mark.parametrize("argv, message", [
    (["--by", "engine.nope", "{root}"], "no label or workload key 'engine.nope'"),
    (["--by", "repeat", "{root}"], "hold 1 value(s) of repeat (0); a comparison needs two"),
    (["{root}/nothing-here", "--", "{root}/b"], "nothing-here: holds no run folder"),
    (["{root}/x*", "--", "{root}/b"], "x*: matches nothing"),
    (["{root}/a", "--"], "compare: an arm is empty"),
])
def test_bad_input_exits_2_naming_it(tmp_path, capsys, argv, message):
    arms(tmp_path, 3, 3, 1.0)
    (tmp_path / "nothing-here").mkdir()
    assert main(["compare", *(a.format(root=tmp_path) for a in argv)]) == 2
    assert message in capsys.readouterr().err


def test_an_interval_excluding_one_is_not_enough_inside_the_noise_floor():
    # A's interleaved halves read 10 and 10.5: an A/A floor of ±5 %
    a = np.array([10, 10.5] * 4)
    inside = metric_result("x.p50", "s", a, np.full(6, 10.6))   # +3.4 %
    assert inside.low > 1 and inside.noise_floor == pytest.approx(0.05)
    assert inside.verdict == "none"
    assert inside.says() == "no detectable difference (noise floor ±5.0%)"
    beyond = metric_result("x.p50", "s", a, np.full(6, 10.9))   # +6.3 %
    assert beyond.verdict == "higher" and beyond.says().startswith("B higher by 6.3%")


def test_the_noise_floor_is_a_factor_either_way():
    """A bimodal arm (a call that sometimes waits 5 ms for the GIL) has an A/A floor far
    above 100 %; a ratio 50x below it is still named, one as far above or below as the
    floor is not."""
    a = np.array([50.0, 5000.0] * 4 + [60.0, 5100.0])  # halves 50 .. 60 against 5000 .. 5100
    floor = metric_result("x.p50", "us", a, a).noise_floor
    assert floor > 10
    far = metric_result("x.p99", "us", np.array([7000.0, 7500, 8000, 7200, 7700, 8100]),
                        np.array([200.0, 230, 240, 210, 220, 250]))
    assert far.noise_floor < 1 and far.verdict == "lower"  # 0.03: beyond a floor below 1
    down = metric_result("x.p50", "us", a, np.full(10, 1.0))
    assert down.ratio < 1 / (1 + floor) and down.verdict == "lower"
    inside = metric_result("x.p50", "us", a, np.full(10, 2500.0 / (1 + floor) * 1.5))
    assert inside.ratio > 1 / (1 + floor) and inside.verdict == "too noisy"


def test_a_floor_beyond_100_percent_is_too_noisy_to_tell_not_a_figure():
    """Within a floor beyond ±100 % (NOISY) the runs cannot tell: the verdict says so, and
    what would make it tellable, instead of "no detectable difference (noise floor
    ±15944%)"; a floor under it keeps its figure."""
    noisy = np.array([1.0, 160.0] * 5)  # halves far apart: a floor of thousands of percent
    m = metric_result("sched_call.p99", "us", noisy, noisy * 1.1)
    assert m.noise_floor > 10 and m.verdict == "too noisy" and not m.difference
    assert m.says("held") == ("too noisy to tell (noise floor beyond ±100%: an arm's runs "
                              "disagree by more than a factor of 2); more runs per arm or a "
                              "quieter host would tell")
    assert "%" not in m.says().partition("±100%")[2]  # the floor's own figure is not said
    quiet = metric_result("x.p50", "us", np.array([10, 10.5] * 4), np.full(6, 10.1))
    assert quiet.verdict == "none" and quiet.says() == "no detectable difference (noise " \
        "floor ±5.0%)"


def test_values_near_the_largest_double_are_undefined_without_a_warning(tmp_path, capsys):
    """Summary values of 1e308: a median of two (their mean), a spread or a ratio past the
    largest double is inf; such a ratio, or an interval reaching it, is `undefined`, and
    nothing is said on stderr (a numpy overflow raises here rather than warns). A finite
    ratio too large for a percentage is said as a factor."""
    import warnings

    rng = np.random.default_rng(0)
    make_arm(tmp_path / "a", "a", 4, 1.0, rng)
    for i, value in enumerate([1e308, 1.5e308, 1.7e308, 1.2e308]):
        synthetic_run(tmp_path / "b" / f"b-r{i}", {"throughput.output_tokens": (value, "tok/s"),
                                                  "ttft.p99": (1e308, "s"),
                                                  "requests.finished": (400, "requests")})
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise",
                                                divide="raise"):
        warnings.simplefilter("error")
        assert main(["compare", "--json", a, "--", b]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        metrics = {m["metric"]: m for m in json.loads(out)["metrics"]}
        assert metrics["throughput.output_tokens"]["median_b"] is None  # inf, as JSON's null
        for name in ("throughput.output_tokens", "ttft.p99"):  # inf ratio; an inf interval
            assert metrics[name]["verdict"] == "undefined", metrics[name]
            assert "past the largest double" in metrics[name]["says"]
        assert main(["compare", a, "--", b]) == 0
        out, err = capsys.readouterr()
        assert err == "" and max(map(len, out.splitlines())) < 250  # no 300-digit number
    huge = metric_result("x.p50", "s", np.array([2.0]), np.array([1e308]), exact=True)
    assert huge.verdict == "higher" and huge.says() == \
        "B higher by a factor of 5e+307 (deterministic: modeled runs)"


def every_metric(value: float) -> dict:
    """A summary of `value` in every metric the comparison headlines name, and two others."""
    from harness.schema.summary import COMPARISON_HEADLINE

    names = {f"{m}.{s}" for rows in COMPARISON_HEADLINE.values() for m, s in rows}
    return {**{n: (value, "s") for n in names}, "e2e.p99": (value, "s"),
            "host_cpu.mean": (value, "%")}


@pytest.mark.parametrize("modeled, gil_b, kind", [(False, "released", "measured"),
                                                  (True, "released", "modeled"),
                                                  (False, "held", "gil")])
def test_the_headline_is_the_kinds_and_all_adds_every_other_row(tmp_path, capsys, modeled,
                                                                gil_b, kind):
    from harness.schema.summary import COMPARISON_HEADLINE, TEXT_STATS

    a = synthetic_run(tmp_path / "x" / "a", every_metric(1.0), modeled=modeled)
    b = synthetic_run(tmp_path / "y" / "b", every_metric(2.0), modeled=modeled, gil_mode=gil_b)
    result = compare(Arm("", tuple(load_runs([a]))), Arm("", tuple(load_runs([b]))))
    headline = [f"{m}.{s}" for m, s in COMPARISON_HEADLINE[kind]]
    assert result.kind == kind and [m.metric for m in result.headline()] == headline
    shown = {m.metric for m in result.metrics if m.metric.partition(".")[2] in TEXT_STATS}
    assert {m.metric for m in result.others()} == shown - set(headline)
    assert main(["compare", str(a), "--", str(b)]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines()[out.splitlines().index(
        next(line for line in out.splitlines() if line.startswith("metric"))) + 1:]]
    assert rows[:len(headline)] == headline and len(rows) == len(headline) + 1
    assert f"the headline metrics of {kind} runs; --all adds" in out
    assert main(["compare", "--all", str(a), "--", str(b)]) == 0
    out = capsys.readouterr().out
    for m in result.metrics:  # every metric's p50, p99, mean ... row
        assert f"\n{m.metric} " in out or m.metric.partition(".")[2] not in TEXT_STATS
    assert out.index(f"\n{headline[-1]} ") < out.index("every other metric") \
        < out.index("\ne2e.p99 ")
    assert main(["compare", "--json", str(a), "--", str(b)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == kind and data["headline"] == headline
    assert len(data["metrics"]) == len(result.metrics)  # --json keeps every metric


def test_arms_are_named_by_what_differs_else_their_folders(tmp_path):
    def arm(*paths):
        return Arm("", tuple(load_runs(paths)))

    held = synthetic_run(tmp_path / "h" / "r0", {"ttft.p99": (1.0, "s")}, gil_mode="held",
                         values={"engine": {"overlap": False, "num_mtp": 1}})
    released = synthetic_run(tmp_path / "r" / "r0", {"ttft.p99": (1.0, "s")},
                             values={"engine": {"overlap": False, "num_mtp": 2}})
    result = compare(arm(held), arm(released))  # a label first, the workload key listed
    assert (result.arm_a, result.arm_b) == ("gil_mode=held", "gil_mode=released")
    assert set(result.differing_keys) == {"gil_mode", "engine.num_mtp"}
    mtp1, mtp2 = (synthetic_run(tmp_path / f"m{n}" / "r0", {"ttft.p99": (n, "s")},
                                values={"engine": {"overlap": False, "num_mtp": n}},
                                modeled=True) for n in (1, 2))
    result = compare(arm(mtp1), arm(mtp2))
    assert (result.arm_a, result.arm_b) == ("engine.num_mtp=1", "engine.num_mtp=2")
    assert result.metric("ttft.p99").says(result.arm_b).startswith("engine.num_mtp=2 higher")
    rng = np.random.default_rng(0)
    make_arm(tmp_path / "base", "r", 2, 1.0, rng)
    make_arm(tmp_path / "new", "r", 2, 1.0, rng)
    result = compare(arm(tmp_path / "base"), arm(tmp_path / "new"))  # nothing differs
    assert (result.arm_a, result.arm_b) == ("base", "new")
    mixed = arm(tmp_path / "base" / "r-r0", tmp_path / "new" / "r-r0")
    assert (compare(mixed, mixed).arm_a, compare(mixed, mixed).arm_b) == ("A", "B")
    assert compare(Arm("mine", mixed.runs), mixed).arm_a == "mine"  # a name given is kept


def test_a_difference_that_rounds_to_zero_gets_no_verdict():
    tiny = metric_result("x.p50", "s", np.array([1.0]), np.array([1.0004]), exact=True)
    assert tiny.verdict == "equal"
    assert tiny.says() == "equal within 0.05% (deterministic: modeled runs)"
    shown = metric_result("x.p50", "s", np.array([1.0]), np.array([1.0006]), exact=True)
    assert shown.verdict == "higher" and shown.says() == \
        "B higher by 0.1% (deterministic: modeled runs)"
    # measured: an interval excluding 1, no noise floor, a ratio of 1.0002
    a = np.array([1.0, 1.00001, 0.99999])
    measured = metric_result("x.p50", "s", a, a * 1.0002)
    assert measured.low > 1 and measured.verdict == "none"
    assert measured.says() == "no detectable difference (noise floor unknown)"


def test_a_metric_zero_in_every_run_is_zero_in_both(tmp_path, capsys):
    zero = metric_result("prefix_cache.hit_rate", "fraction", np.zeros(3), np.zeros(3))
    assert zero.verdict == "equal" and zero.says() == "0 in both" and np.isnan(zero.ratio)
    modeled = metric_result("x.p50", "s", np.zeros(1), np.zeros(1), exact=True)
    assert modeled.says() == "0 in both"
    one_zero = metric_result("x.p50", "s", np.zeros(3), np.ones(3))
    assert one_zero.verdict == "undefined"  # A's median 0, B's not: no ratio
    a = synthetic_run(tmp_path / "a", {"prefix_cache.hit_rate": (0.0, "fraction")})
    b = synthetic_run(tmp_path / "b", {"prefix_cache.hit_rate": (0.0, "fraction")})
    assert main(["compare", "--all", str(a), "--", str(b)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("prefix_cache.hit_rate"))
    assert row.split()[-4:] == ["-", "0", "in", "both"] and "undefined" not in row


def test_by_a_key_of_three_values_compares_each_against_the_baseline(tmp_path, capsys):
    for mtp in (2, 0, 1):
        for i in range(2):
            synthetic_run(tmp_path / f"mtp{mtp}" / f"r{i}", {"ttft.p99": (1.0 + mtp, "s")},
                          values={"engine": {"overlap": False, "num_mtp": mtp}}, modeled=True)
    given = [str(tmp_path / f"mtp{mtp}") for mtp in (2, 0, 1)]  # the runs' order, not sorted
    arms = arms_by(load_runs(given), "engine.num_mtp")
    assert [a.name for a in arms] == ["engine.num_mtp=2", "engine.num_mtp=0",
                                      "engine.num_mtp=1"]
    assert main(["compare", "--json", "--by", "engine.num_mtp", *given]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline"] == "engine.num_mtp=2"
    assert [(c["arm_a"], c["arm_b"]) for c in data["comparisons"]] == [
        ("engine.num_mtp=2", "engine.num_mtp=0"), ("engine.num_mtp=2", "engine.num_mtp=1")]
    assert main(["compare", "--by", "engine.num_mtp", "--baseline", "1", *given]) == 0
    out = capsys.readouterr().out
    assert "A: engine.num_mtp=1, 2 run(s)    B: engine.num_mtp=2, 2 run(s)" in out
    assert "A: engine.num_mtp=1, 2 run(s)    B: engine.num_mtp=0, 2 run(s)" in out
    assert "engine.num_mtp=0 lower by 50.0% (deterministic: modeled runs)" in out
    assert main(["compare", "--csv", "--by", "engine.num_mtp", *given]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("arm_a,arm_b,metric,unit,") and len(lines) == 3
    assert main(["compare", "--by", "engine.num_mtp", "--baseline", "7", *given]) == 2
    assert "--baseline 7: no run has engine.num_mtp=7 (the runs' values: 2, 0, 1)" in \
        capsys.readouterr().err
    assert main(["compare", "--baseline", "1", given[0], "--", given[1]]) == 2
    assert "--baseline VALUE names a value of --by KEY" in capsys.readouterr().err


def test_by_gil_mode_takes_a_sweeps_order_of_arms(tmp_path):
    """The released arm is the baseline however the sweep shuffled its runs."""
    from harness.analysis.compare import arms_by
    from harness.record.run import Run
    from tests.helpers import synthetic_run

    runs = [Run.read(synthetic_run(tmp_path / f"{i}-{mode}", {"ttft.p99": (0.1, "s")},
                                   gil_mode=mode))
            for i, mode in enumerate(("released_aa", "held", "released"))]
    assert [a.name for a in arms_by(runs, "gil_mode")] == \
        ["gil_mode=released", "gil_mode=held", "gil_mode=released_aa"]
