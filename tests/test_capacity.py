"""steptrace capacity: the highest arrival rate that meets a workload's SLO on a modeled
device (docs/capacity.md): its exit statuses, --json, the probes as run folders with
their capacity table, a search's folder standing for its run at capacity, its bounds (the
resolution floor, the probe limit), the length check (the answer re-run on a trace twice as
long), bad input."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.analysis.runs import find_runs
from harness.analysis.steady_state import of_run
from harness.commands import main
from harness.errors import BadInput
from harness.record.run import Run
from harness.schema import arrow_schema
from harness.sweeps.capacity import CapacityError, knob, less_resolution
from harness.workload import load_workload
from tests.helpers import MODELED, within

# Not marked core: its searches replay B200 deployments with large KV pools, which the
# sanitizer's checked build validates rank by rank every step (minutes a search); the C++
# they run is what tests/test_deployment.py runs under it.

# One request at a time (max_num_seqs 1) arriving at constant gaps: above the rate at which
# the node serves them (about 22 req/s), the queue grows and TTFT with it, so attainment
# falls with the rate. 200 requests: with 100, 25 req/s meets the SLO target (the queue has
# no time to build) and misses it on twice the requests, the length check.
SERIAL = ["--set", "engine.max_num_seqs=1", "--set", "trace.generate.arrival=constant",
          "--set", "trace.generate.requests=200", "--set", "trace.generate.prompt={fixed: 32}",
          "--set", "trace.generate.output={fixed: 8}"]
TTFT_SLO = 0.5  # s


def workload(tmp_path, extra="slo: {ttft: %s}\n" % TTFT_SLO, text=MODELED):
    path = tmp_path / "w.yaml"
    path.write_text(text + f"output: {tmp_path / 'results'}\nname: small\n" + extra)
    return path


def capacity(capsys, argv, status):
    assert main(["capacity", *map(str, argv)]) == status, capsys.readouterr().err
    return capsys.readouterr()


def test_the_capacity_is_bracketed_and_every_probe_is_a_run(tmp_path, capsys):
    path = workload(tmp_path)
    out = json.loads(capacity(capsys, [path, *SERIAL, "--resolution", "0.5", "--json"], 0).out)
    assert out["outcome"] == "capacity" and out["device"] == "H200" and out["modeled"]
    assert out["slo"] == {"ttft": TTFT_SLO} and out["attainment_target"] == 0.9
    assert out["load_mode"] == "trace" and out["rate_key"] == "trace.generate.rate"
    c, every = out["capacity"], out["probes"]
    assert c["concurrency"] is None and {p["concurrency"] for p in every} == {None}
    probes = [p for p in every if not p["length_check"]]
    assert c["rate"] < c["missed_at"] <= 1.5 * c["rate"]
    assert max(p["rate"] for p in probes if p["met"]) == c["rate"]
    assert min(p["rate"] for p in probes if not p["met"]) == c["missed_at"]
    assert [p["at_capacity"] for p in probes] == [p["rate"] == c["rate"] for p in probes]
    for p in probes:  # each probe a run at its rate, its attainment read from its summary
        run = Run.read(tmp_path / out["folder"] / p["run_id"])
        assert run.complete and run.keys["trace.generate.rate"] == pytest.approx(p["rate"])
        assert p["met"] == (run.value("goodput.attainment") >= 0.9)
        assert p["output_tokens_per_device"] == run.value("throughput.output_tokens") / 8
    assert c["attainment"] >= 0.9
    # the answer less its resolution on twice the requests, last, outside the bracket
    check = every[-1]
    assert [p for p in every if p["length_check"]] == [check] and not check["at_capacity"]
    assert check["rate"] == pytest.approx(c["rate"] / 1.5)
    assert (check["requests"], check["met"]) == (400, True)
    assert {p["requests"] for p in probes} == {200}
    steady = of_run(Run.read(c["run_dir"]))  # the run at the answer reached its steady state
    assert steady.found and steady.start_s < steady.end_s
    assert out["requests"] == 200 and out["length_check"] == dict(
        status="passed", requests=400, setting="trace.generate.requests=400", concurrency=None,
        rate=check["rate"],
        attainment=check["attainment"], goodput=check["goodput"], reason=None,
        run_dir=str(Path(out["folder"]) / check["run_id"]),
        steady_state=dict(found=True, reason=None, start_s=steady.start_s, end_s=steady.end_s))
    assert Run.read(out["length_check"]["run_dir"]).keys["trace.generate.requests"] == 400
    table = pq.read_table(out["table"])
    assert table.schema.remove_metadata() == arrow_schema("capacity")
    assert table.column("run_id").to_pylist() == [p["run_id"] for p in every]
    # the search's folder, given to report or compare, stands for its run at capacity
    assert find_runs([out["folder"]]) == [tmp_path / c["run_dir"]]


def test_text_output_states_the_answer_its_resolution_and_the_profile(tmp_path, capsys):
    path = workload(tmp_path)
    text = capacity(capsys, [path, *SERIAL, "--resolution", "1"], 0).out  # 100 ... 12.5
    assert "steptrace capacity: small on H200 (modeled, virtual clock)" in text
    assert "capacity: " in text and "output tok/s per device" in text
    assert "modeled on the H200 profile" in text and "run at capacity: " in text
    assert ("length check: on a trace twice as long (400 requests) the target is met at 6.25 "
            "req/s, the answer less its resolution (attainment 100.0%): the answer does not "
            "depend on the trace's length") in text


# A short trace: the B200 node's workload cut to 40 requests. All 40 arrive within half a
# second at the rate a 40-request search reports (119 req/s, 26x the 4,000-request
# capacity), and the node drains them at its own pace: on a trace twice as long the queue
# builds, and attainment falls to 55 % even 5 % below that rate.
SHORT = ["workloads/sm100_vs_ascend950.yaml", "--set", "trace.generate.requests=40"]


@pytest.mark.slow  # probes of the B200 node's 40 and 80 requests
def test_an_answer_that_depends_on_the_trace_length_exits_1_with_the_fix(tmp_path, capsys):
    rate = "119.21834995905445"  # the full search's answer (the slow test below)
    argv = [*SHORT, "--set", f"trace.generate.rate={rate}", "--highest", rate,
            "--set", f"output={tmp_path}"]
    result = capacity(capsys, [*argv, "--json"], 1)
    out = json.loads(result.out)
    assert out["outcome"] == "trace_too_short" and out["requests"] == 40
    assert [(p["requests"], p["met"], p["length_check"]) for p in out["probes"]] == [
        (40, True, False), (80, False, True)]
    check = out["length_check"]
    assert check["status"] == "failed" and check["attainment"] < 0.6
    assert out["capacity"]["rate"] == float(rate)
    assert check["rate"] == pytest.approx(float(rate) / 1.05)  # less the resolution
    assert "(length check, 80 requests): attainment 55.0%: missed" in result.err
    text = capacity(capsys, argv, 1).out
    assert ("no capacity: the answer depends on the trace's length: 119.2 req/s met the target "
            "on 40 requests (attainment 90.0%), but on 80 even 113.5 req/s, the answer less "
            "its resolution, misses it (55.0%") in text
    assert "use at least 80 requests (--set trace.generate.requests=80)" in text
    assert "run at the highest rate that met: " in text


@pytest.mark.slow
def test_a_short_traces_search_is_refused(tmp_path, capsys):
    out = json.loads(capacity(capsys, [*SHORT, "--set", f"output={tmp_path}", "--json"], 1).out)
    assert out["outcome"] == "trace_too_short"
    assert out["capacity"]["rate"] == pytest.approx(119.2, rel=1e-3)
    assert out["length_check"]["status"] == "failed"


def test_the_length_check_can_be_turned_off(tmp_path, capsys):
    argv = [workload(tmp_path), *SERIAL, "--set", "trace.generate.rate=10", "--highest", "10",
            "--no-length-check"]
    out = json.loads(capacity(capsys, [*argv, "--json"], 0).out)
    assert out["outcome"] == "at_least" and len(out["probes"]) == 1  # 10 req/s met
    assert out["length_check"] == dict(status="off", requests=400,
                                       setting="trace.generate.requests=400",
                                       concurrency=None, rate=None,
                                       attainment=None, goodput=None, reason=None, run_dir=None,
                                       steady_state=None)
    assert ("length check: off (--no-length-check); the answer may depend on the trace's "
            "length") in capacity(capsys, argv, 0).out


@pytest.mark.slow
def test_an_slo_missed_at_every_rate_probed_exits_1_and_says_so(tmp_path, capsys):
    path = workload(tmp_path, "slo: {ttft: 1.0e-9}\n")  # no first token comes that soon
    result = capacity(capsys, [path, "--lowest", "50", "--json"], 1)
    out = json.loads(result.out)
    assert out["outcome"] == "none" and out["capacity"] is None
    assert [p["rate"] for p in out["probes"]] == [100.0, 50.0]  # MODELED's rate, halved
    assert "attainment 0.0%: missed" in result.err
    with pytest.raises(BadInput, match="no rate met the SLO target"):
        find_runs([out["folder"]])
    text = capacity(capsys, [path, "--lowest", "100", "--highest", "100"], 1).out
    assert "no capacity: even the lowest rate probed, 100 req/s, misses the target" in text


@pytest.mark.parametrize("extra, argv, words", [
    ("", [], "slo: capacity is the highest rate that meets an SLO"),
    ("slo: {tpot: 0.1}\n", ["--set", "gil=both"], "a capacity probe is one run, but the "
                                                  "workload plans 2"),
    ("slo: {tpot: 0.1}\n", ["--attainment", "1.5"], "--attainment: expected a share of "
                                                     "requests in (0, 1], got 1.5"),
    ("slo: {tpot: 0.1}\n", ["--max-probes", "0"], "--max-probes: expected an integer >= 1, "
                                                   "got 0"),
    ("slo: {tpot: 0.1}\n", ["--lowest", "200"], "must hold the starting rate 100"),
    ("slo: {tpot: -1}\n", [], "slo.tpot: expected a finite number > 0"),
])
def test_bad_input_exits_2_naming_it_and_writes_nothing(tmp_path, capsys, extra, argv, words):
    path = workload(tmp_path, extra)
    assert words in capacity(capsys, [path, *argv], 2).err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("resolution", ["1e-17", "9e-7", "0", "-0.05", "nan", "inf"])
def test_a_resolution_below_the_floor_exits_2_at_once_and_writes_nothing(tmp_path, capsys,
                                                                         resolution):
    # 1e-17 used to probe one rate for ever once the bracket's ends were adjacent doubles,
    # a run folder each time
    path = workload(tmp_path)
    with within(60):
        result = capacity(capsys, [path, "--resolution", resolution], 2)
    assert result.out == "" and result.err == (
        f"steptrace: error: --resolution: expected a finite number >= 1e-06 (the finest the "
        f"search takes), got {float(resolution)!r}\n")
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_search_out_of_probes_exits_1_with_the_bracket_it_got(tmp_path, capsys):
    path = workload(tmp_path)
    argv = [path, *SERIAL, "--set", "trace.generate.rate=25", "--max-probes", "2"]
    result = capacity(capsys, [*argv, "--json"], 1)
    out = json.loads(result.out)
    assert out["outcome"] == "probe_limit" and out["max_probes"] == 2
    assert [(p["rate"], p["met"]) for p in out["probes"]] == [(25.0, False), (12.5, True)]
    assert len(pq.read_table(out["table"])) == 2  # no length check: no answer to check
    assert out["length_check"] is None
    c = out["capacity"]  # the probe at the bracket's low end: not a capacity at the resolution
    assert (c["rate"], c["missed_at"]) == (12.5, 25.0)
    text = capacity(capsys, argv, 1).out
    assert ("no capacity: the search ran out of its 2 probes (--max-probes) with the target met "
            "at 12.5 req/s and missed at 25 req/s (+100.0%), wider than the resolution "
            "0.05") in text
    assert "run at the highest rate that met: " in text


def test_a_device_that_is_not_modeled_is_refused(tmp_path, capsys):
    path = tmp_path / "w.yaml"
    path.write_text(f"trace: {{generate: {{requests: 4}}}}\nmodel: tiny\ndevice: cpu\n"
                    f"slo: {{tpot: 0.1}}\noutput: {tmp_path / 'results'}\n")
    err = capacity(capsys, [path], 2).err
    assert "device: capacity is searched on a modeled device's virtual clock" in err
    assert "expected modeled:<profile>, got cpu" in err
    assert not (tmp_path / "results").exists()


def test_a_trace_file_is_probed_through_its_time_scale(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,max_new_tokens\n0,8,4\n1,8,4\n2,8,4\n")
    text = MODELED.replace(MODELED.split("engine:")[0], "trace: {file: t.csv, time_scale: 2}\n")
    rate = knob(load_workload(workload(tmp_path, "slo: {tpot: 0.1}\n", text)))
    assert rate.rate == 0.5  # 2 gaps over 4 s once scaled
    assert rate.override(1.0) == "trace.time_scale=1"  # twice the rate: half the time scale
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,max_new_tokens\n0,8,4\n0,8,4\n")
    with pytest.raises(CapacityError, match="arrive at one instant: no arrival rate to scale"):
        knob(load_workload(tmp_path / "w.yaml"))


# A request a second, each served before the next arrives: 10 of them are enough steps for
# a steady state (one sequence running), 3 too few.
@pytest.mark.parametrize("rows, limit, checked", [(25, 10, 20), (25, None, None),
                                                  (25, 15, None), (3, None, None)])
def test_a_trace_file_is_checked_on_twice_its_limit_where_it_has_the_rows(tmp_path, capsys,
                                                                          rows, limit, checked):
    lines = "".join(f"{i},8,4\n" for i in range(rows))
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,max_new_tokens\n" + lines)
    text = MODELED.replace(MODELED.split("engine:")[0],
                           f"trace: {{file: t.csv, limit: {'null' if limit is None else limit}}}\n")
    path = workload(tmp_path, "slo: {ttft: 10}\n", text)
    steady = rows > 3
    out = json.loads(capacity(capsys, [path, "--highest", "1", "--json"], 0 if steady else 1).out)
    check = out["length_check"]
    assert check["steady_state"]["found"] == steady
    if checked is None:  # the file holds too few rows: not twice the limit (null: all)
        short = (f"the trace file holds {rows} requests, fewer than {2 * (limit or rows)} "
                 f"(twice the search's)")
        assert check["rate"] is None and not any(p["length_check"] for p in out["probes"])
        if steady:
            assert check["status"] == "unchecked" and check["reason"] == short
        else:  # its run reached no steady state: no capacity, whatever the rows
            assert (out["outcome"], check["status"]) == ("trace_too_short", "failed")
            assert check["reason"] == (f"the run at the answer reached no steady state: "
                                       f"{check['steady_state']['reason']}; {short}")
            assert check["steady_state"]["reason"].startswith("too short: ")
        return
    assert check["status"] == "passed" and check["setting"] == f"trace.limit={checked}"
    run = Run.read(check["run_dir"])
    assert run.keys["trace.limit"] == checked
    # the doubled trace at the answer less its resolution: gaps of 1.05 s at 1 / 1.05 req/s
    assert run.keys["trace.time_scale"] == pytest.approx(1.05)


def test_show_prints_a_search_again_from_its_folder(tmp_path, capsys):
    argv = [workload(tmp_path), *SERIAL, "--set", "trace.generate.rate=10", "--highest", "10"]
    text = capacity(capsys, argv, 0).out
    folder = Path(text.split("probes and table: ")[1].strip()).parent
    assert main(["show", str(folder)]) == 0 and capsys.readouterr().out == text
    assert main(["show", str(folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads((folder / "capacity.json").read_text())
    assert out["outcome"] == "at_least" and out["length_check"]["status"] == "passed"
    (folder / "capacity.json").write_text("{")
    assert main(["show", str(folder)]) == 2
    assert "capacity.json: unreadable" in capsys.readouterr().err


@pytest.mark.slow  # two whole searches of a P/D deployment
def test_a_pd_deployment_is_searched_per_device_over_both_pools(tmp_path, capsys):
    """docs/capacity.md, "P/D deployments": the probes scale the arrival rate into the
    prefill router; output tokens per device are over every device of both pools (2 x 2
    prefill + 1 x 2 decode: 6). Two searches' folders, 2P1D and 1P1D, compare at capacity
    on the report's deployment page."""
    import re

    from tests.helpers import PD

    path = workload(tmp_path, "slo: {ttft: 0.05}\n", PD)
    searches = {}
    for name, devices, sets in (("2P1D", 6, []),
                                ("1P1D", 4, ["--set", "deployment.prefill.instances=1"])):
        out = json.loads(capacity(capsys, [path, "--set", "trace.generate.requests=100",
                                           *sets, "--resolution", "0.5", "--json"], 0).out)
        assert out["outcome"] == "capacity" and out["length_check"]["status"] == "passed"
        for p in out["probes"]:
            run = Run.read(Path(out["folder"]) / p["run_id"])
            assert run.deployment == name and run.devices == devices
            assert p["output_tokens_per_device"] == pytest.approx(
                run.value("throughput.output_tokens") / devices)
            assert p["met"] == (run.value("goodput.attainment") >= 0.9)
        at = Run.read(out["capacity"]["run_dir"])
        assert at.keys["trace.generate.rate"] == pytest.approx(out["capacity"]["rate"])
        assert out["capacity"]["output_tokens_per_device"] == pytest.approx(
            at.value("throughput.output_tokens") / devices)
        searches[name] = out
    report = tmp_path / "report"
    assert main(["report", searches["2P1D"]["folder"], searches["1P1D"]["folder"],
                 "-o", str(report)]) == 0
    page = (report / "index.html").read_text()
    hardware = page[page.index('id="hardware"'):page.index('id="figures"')]
    assert "<h2>Deployment comparison</h2>" in hardware
    row = re.search(r"<tr><td>output tokens per device</td><td[^>]*>tok/s</td><td>([^<]+)"
                    r"</td><td>([^<]+)</td>", hardware)
    from harness.analysis.report.headline import fmt

    assert row and list(row.groups()) == [
        fmt(searches[n]["capacity"]["output_tokens_per_device"]) for n in ("2P1D", "1P1D")]


# A closed loop (load.mode: concurrency) of the SERIAL workload: one request served at a
# time, the others in flight waiting their turn, so TTFT grows with the requests in flight
# and attainment falls with them; the rate is what the loop achieves, not a knob.
CLOSED = [*SERIAL, "--set", "load.mode=concurrency", "--set", "load.concurrency=4"]


def test_a_closed_loop_is_searched_over_the_requests_in_flight(tmp_path, capsys):
    out = json.loads(capacity(capsys, [workload(tmp_path), *CLOSED, "--json"], 0).out)
    assert out["outcome"] == "capacity" and out["load_mode"] == "concurrency"
    assert out["workload_concurrency"] == 4 and "rate_key" not in out
    c, every = out["capacity"], out["probes"]
    probes = [p for p in every if not p["length_check"]]
    # integers, doubling from the workload's 4 until one misses, then bisected to adjacent
    assert [p["concurrency"] for p in probes[:2]] == [4, 8]
    assert all(isinstance(p["concurrency"], int) for p in every)
    assert c["missed_at"] == c["concurrency"] + 1 and c["attainment"] >= 0.9
    assert max(p["concurrency"] for p in probes if p["met"]) == c["concurrency"]
    assert min(p["concurrency"] for p in probes if not p["met"]) == c["missed_at"]
    assert [p["at_capacity"] for p in probes] == [p["concurrency"] == c["concurrency"]
                                                  for p in probes]
    for p in probes:  # each a run at its concurrency; the rate is the run's own outcome
        run = Run.read(Path(out["folder"]) / p["run_id"])
        assert run.keys["load.mode"] == "concurrency"
        assert run.keys["load.concurrency"] == p["concurrency"]
        assert p["rate"] == run.value("throughput.requests") > 0
        assert p["met"] == (run.value("goodput.attainment") >= 0.9)
    above = next(p for p in probes if p["concurrency"] == c["missed_at"])
    assert above["attainment"] < 0.9  # answer + 1 misses the target
    at = Run.read(c["run_dir"])
    assert c["rate"] == at.value("throughput.requests")
    assert c["output_tokens_per_device"] == at.value("throughput.output_tokens") / 8
    # the length check: below 1 / resolution the answer less its resolution is the answer
    check = every[-1]
    assert check["length_check"] and check["concurrency"] == c["concurrency"]
    assert (check["requests"], check["met"]) == (400, True)
    assert out["length_check"]["status"] == "passed"
    assert out["length_check"]["concurrency"] == c["concurrency"]
    assert out["length_check"]["setting"] == "trace.generate.requests=400"
    table = pq.read_table(out["table"])
    assert table.schema.remove_metadata() == arrow_schema("capacity")
    assert table.column("concurrency").to_pylist() == [p["concurrency"] for p in every]
    assert find_runs([out["folder"]]) == [Path(c["run_dir"])]


def test_a_closed_loops_text_names_the_requests_in_flight_and_the_rate(tmp_path, capsys):
    result = capacity(capsys, [workload(tmp_path), *CLOSED, "--lowest", "2"], 0)
    text = result.out
    out = json.loads((Path(text.split("probes and table: ")[1].strip()).parent
                      / "capacity.json").read_text())
    c = out["capacity"]
    assert (f"capacity: {c['concurrency']} requests in flight, {c['rate']:.4g} req/s, "
            f"{c['output_tokens_per_device']:,.1f} output tok/s per device (attainment") in text
    assert (f"resolution: it met the target at {c['concurrency']} requests in flight and "
            f"missed it at {c['missed_at']} requests in flight") in text
    assert (f"the target is met at {c['concurrency']} requests in flight, the answer less its "
            f"resolution") in text
    assert "in flight  rate req/s" in text
    assert "  probe 0: 4 requests in flight, " in result.err
    folder = Path(out["folder"])  # show prints it again, from its capacity.json
    assert main(["show", str(folder)]) == 0 and capsys.readouterr().out == text


def test_a_closed_loop_met_at_every_concurrency_up_to_the_trace_is_a_lower_bound(tmp_path,
                                                                                 capsys):
    # beyond the trace's requests every request is in flight at 0: the default highest
    argv = [workload(tmp_path, "slo: {ttft: 100}\n"), *CLOSED[-4:], "--no-length-check",
            "--json"]  # MODELED's 12 requests
    out = json.loads(capacity(capsys, argv, 0).out)
    assert out["outcome"] == "at_least" and out["capacity"]["concurrency"] == 12
    assert [p["concurrency"] for p in out["probes"]] == [4, 8, 12]
    text = capacity(capsys, argv[:-1], 0).out
    assert ("capacity: at least 12 requests in flight, "
            f"{out['capacity']['rate']:.4g} req/s, ") in text
    assert "every concurrency probed met the target, up to the highest" in text


@pytest.mark.parametrize("extra, argv, message", [
    ("", ["--set", "load.mode=concurrency", "--set", "load.concurrency=4"],
     "slo: capacity is the highest rate that meets an SLO"),
    ("slo: {ttft: 1}\n", ["--set", "load.mode=offline"],
     "load.mode offline has no rate: expected trace (or concurrency: a closed loop, searched "
     "over its requests in flight; offline releases every request at 0 and has no knob)"),
    ("slo: {ttft: 1}\n", ["--set", "load.mode=concurrency"],
     "load.mode: concurrency needs the requests in flight"),
    ("slo: {ttft: 1}\n", [*CLOSED[-4:], "--lowest", "0"],
     "requests in flight to probe must hold the starting 4: expected whole numbers"),
    ("slo: {ttft: 1}\n", [*CLOSED[-4:], "--lowest", "1.5"], "got lowest 1.5, highest 12"),
    ("slo: {ttft: 1}\n", [*CLOSED[-4:], "--highest", "3"], "got lowest 1, highest 3"),
    ("slo: {ttft: 1}\n", [*CLOSED[-4:], "--lowest", "5"], "got lowest 5, highest 12"),
])
def test_a_search_it_cannot_run_is_bad_input_and_writes_nothing(tmp_path, capsys, extra, argv,
                                                                 message):
    err = capacity(capsys, [workload(tmp_path, extra), *argv], 2).err
    assert message in err
    assert not (tmp_path / "results").exists()


def test_a_closed_loop_that_misses_everywhere_or_runs_out_of_probes_says_so(tmp_path, capsys):
    path = workload(tmp_path, "slo: {ttft: 0.001}\n")
    text = capacity(capsys, [path, *CLOSED], 1).out
    assert ("no capacity: even the lowest concurrency probed, 1 request in flight, misses the "
            "target") in text
    path = workload(tmp_path)
    text = capacity(capsys, [path, *CLOSED, "--max-probes", "2"], 1).out
    assert ("no capacity: the search ran out of its 2 probes (--max-probes) with every "
            "concurrency probed meeting the target, up to 8 requests in flight") in text
    assert "run at the highest concurrency that met: " in text


@pytest.mark.parametrize("answer, resolution, at", [(11, 0.05, 11), (20, 0.05, 20),
                                                    (21, 0.05, 20), (105, 0.05, 100),
                                                    (1, 0.5, 1), (100, 1.0, 50), (3, 1.0, 2)])
def test_a_closed_loops_length_check_runs_at_the_fewest_in_flight_within_the_resolution(
        answer, resolution, at):
    assert less_resolution(answer, resolution) == at


def test_a_closed_loop_on_a_trace_file_counts_its_rows_and_checks_twice_its_limit(tmp_path,
                                                                                  capsys):
    # every row at 0: no rate to scale, but a closed loop ignores the trace's times
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,max_new_tokens\n" + "0,8,4\n" * 6)
    text = MODELED.replace(MODELED.split("engine:")[0], "trace: {file: t.csv, limit: 3}\n")
    path = workload(tmp_path, "slo: {ttft: 10}\n", text)
    argv = [path, "--set", "load.mode=concurrency", "--set", "load.concurrency=1", "--json"]
    out = json.loads(capacity(capsys, argv, 1).out)
    assert out["requests"] == 3
    assert [p["concurrency"] for p in out["probes"]] == [1, 2, 3, 3]  # highest: the 3 rows
    check = out["length_check"]
    assert check["setting"] == "trace.limit=6"
    assert check["concurrency"] == 3 and Run.read(check["run_dir"]).keys["trace.limit"] == 6
    # 3 in flight of 3 requests: all released at once, no steady state in between, so the
    # lower bound is no answer though the doubled trace meets the target
    assert out["probes"][-1]["met"] and check["status"] == "failed"
    assert out["outcome"] == "trace_too_short"
    assert check["steady_state"]["reason"].startswith("every request arrived at once")
