"""steptrace report: one page, a Markdown summary and figures from run folders, written
whole or not at all; the GIL and hardware sections where the arms differ by those; bad
input named, exit 2."""

import json
import re

import numpy as np
import pytest

from harness.analysis.report.timeline import BINS, binned, cdf_points
from harness.commands import main
from tests.helpers import modeled_runs, pd_runs, with_device_table

# draws whole reports (matplotlib's text layout, seconds a page): the slow tier's
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    released, held = modeled_runs(root / "gil", "gil=both")
    (b200,) = modeled_runs(root / "b200", "device=modeled:B200")
    return dict(released=released, held=held, b200=b200, sweep=root / "gil")


@pytest.fixture(scope="module")
def one(runs, tmp_path_factory):
    """The report of one run whose device table has readings (a modeled run this short
    has none: the sampler's first reading comes after its end)."""
    root = tmp_path_factory.mktemp("one")
    run = with_device_table(runs["released"], root / "copies")
    assert main(["report", str(run), "-o", str(root / "r"), "--json"]) == 0
    return root / "r"


def report(capsys, argv, status=0):
    assert main(["report", *map(str, argv), "--json"]) == status
    out = capsys.readouterr()
    return json.loads(out.out) if status == 0 else out.err


def test_one_run_gives_a_self_contained_page_summary_and_figures(one):
    page = (one / "index.html").read_text()
    pngs = sorted((one / "figures").glob("*.png"))
    assert len(pngs) == 9
    assert page.count('<img ') == len(pngs) == page.count('src="data:image/png;base64,')
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing fetched, no link out
    titles = re.findall(r"<figure [^>]*><h3>(.*?)</h3>", page)
    assert len(titles) == 9  # the device figure is the host's CPU: the devices are modeled
    assert all('class="badge modeled">modeled' in t for t in titles if "CPU" not in t)
    assert [t for t in titles if 'class="badge host">host' in t] == [
        'The harness host&#39;s CPU: the devices are modeled<span class="badge host">host'
        '</span>']
    for name in ("latency_cdf", "itl", "load", "tokens_per_step", "step_time", "batch_shapes",
                 "compute", "device", "prompt_vs_ttft"):
        assert (one / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    summary = (one / "summary.md").read_text()
    assert "| requests finished | requests | 12 |" in summary
    assert "|\n\nFigures: `figures/latency_cdf.png`, " in summary  # a blank line ends the table
    assert "B (" not in summary  # one arm: nothing to compare


def test_a_gil_sweep_gets_the_gil_page_and_the_compare_table(runs, tmp_path, capsys):
    out = report(capsys, [runs["sweep"], "-o", tmp_path / "r"])
    # in the sweep's order of arms, released first (tests/test_report_gil.py)
    assert out["runs"] == 2 and out["arms"] == ["released", "held"]
    page = (tmp_path / "r" / "index.html").read_text()
    assert 'id="gil"' in page and "figures/sched_cdf.png" in out["figures"]
    summary = (tmp_path / "r" / "summary.md").read_text()
    # the verdict, each arm against released, in place of a comparison with the first arm
    assert "### gil_mode=held (B) against gil_mode=released (A)" in summary
    assert "## held (B) against" not in summary and "ratio to first" not in summary
    assert "ratio to released" in summary
    assert "no interval: 1 run(s) in an arm, 3 needed" in summary
    # GIL arms: docs/gil.md's primary metrics lead; the rest in a collapsed section
    compared = summary[summary.index("(B) against"):summary.index("\nFigures: ")]
    headline, rest = compared.split("<details><summary>Every other metric (")
    assert "The headline metrics of gil runs:" in headline
    assert [r.split(" | ")[0] for r in headline.splitlines() if r.startswith("| ")] == \
        ["| metric", "| sched_call.p50", "| sched_call.p99", "| step_rate.per_s"]
    assert "| ttft.p99 |" in rest and rest.index("\n</details>\n") > rest.index("ttft.p99")
    import cmarkgfm  # GitHub's renderer: the table is inside the collapsed section
    from cmarkgfm.cmark import Options

    html = cmarkgfm.github_flavored_markdown_to_html(summary, options=Options.CMARK_OPT_UNSAFE)
    collapsed = html[html.index("<details>"):html.index("</details>")]
    assert "<table>" in collapsed and "<td>ttft.p99</td>" in collapsed
    assert '<details><summary>Every other metric (' in page
    assert 'id="hardware"' not in page


def test_arms_of_two_devices_get_the_hardware_page_with_assumptions(runs, tmp_path, capsys):
    out = report(capsys, [runs["released"], runs["b200"], "-o", tmp_path / "r"])
    assert out["arms"] == ["H200 (modeled)", "B200 (modeled)"]
    page = (tmp_path / "r" / "index.html").read_text()
    hardware = page[page.index('id="hardware"'):page.index('id="figures"')]
    assert hardware.count("the profile's figures") == 2
    for figure in ("step_overhead_us", "compute_efficiency"):
        row = re.search(rf"<td>{figure}</td><td>[\d.]+</td><td[^>]*>(.*?)</td>", hardware)
        assert row and "assumption" in row.group(1)  # shown as an assumption, not a fact
    for figure, kind in (("scaleout_gb_s", "vendor"),
                         ("network_efficiency", "fitted")):  # H200's network
        assert re.search(rf"<td>{figure}</td><td>[\d.]+</td><td[^>]*>{kind}</td>", hardware)
    assert "mfu model" in hardware and hardware.count('class="badge modeled">modeled') >= 2


def test_an_earlier_report_is_replaced_another_folder_refused(runs, one, tmp_path, capsys):
    """The earlier report's marker lists what it wrote: the new report replaces the folder
    whole (a figure the new one does not draw is gone) and lists its own files; a folder
    without a marker is refused, left as it was."""
    import shutil

    out_dir = tmp_path / "r"
    shutil.copytree(one, out_dir)
    assert (out_dir / "figures" / "device.png").is_file()
    report(capsys, [runs["held"], "-o", out_dir])
    assert not (out_dir / "figures" / "device.png").exists()  # held has no device readings
    assert runs["held"].name in (out_dir / "summary.md").read_text()
    marker = json.loads((out_dir / "report.json").read_text())
    assert marker["kind"] == "steptrace report" and "-o" in marker["command"]
    assert set(marker["files"]) == {str(p.relative_to(out_dir)) for p in out_dir.rglob("*")
                                    if p.is_file() and p.name != "report.json"}
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    err = report(capsys, [runs["released"], "-o", other], status=2)
    assert err == f"steptrace: error: {other} is not a report: it holds notes.txt and no " \
        f"report.json; report -o replaces only a report it made, or writes a new folder\n"
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "r"]  # no temporary left


@pytest.mark.parametrize("breakage, words", [
    ("nothing", "holds no run folder"),
    ("no batches", "no batches table"),
    ("bad manifest", "manifest.json"),
    ("no steps", "no step was recorded"),
])
def test_bad_input_exits_2_naming_it_and_writes_nothing(runs, tmp_path, capsys, breakage,
                                                        words):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(runs["released"], run)
    if breakage == "nothing":
        run = tmp_path / "empty"
        run.mkdir()
    elif breakage == "no batches":
        (run / "batches.parquet").unlink()
    elif breakage == "no steps":  # stopped before its first step
        import pandas as pd
        steps = run / "steps.parquet"
        pd.read_parquet(steps).iloc[:0].to_parquet(steps)
    else:
        (run / "manifest.json").write_text("{not json")
    err = report(capsys, [run, "-o", tmp_path / "r"], status=2)
    assert words in err and str(run) in err
    assert not (tmp_path / "r").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_timelines_are_bounded_for_drawing_and_cdfs_span_every_sample():
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 3600, 1_000_000))
    centres, v = binned(t, {"x": np.ones_like(t)}, reduce="sum")
    assert len(centres) == BINS and v["x"].sum() == len(t)  # no sample lost to the bins
    values = rng.lognormal(size=1_000_000)
    x, q = cdf_points(values)
    assert len(x) == 1000 and x[0] == values.min() and x[-1] == values.max()
    assert x[np.searchsorted(q, 0.5)] == pytest.approx(np.median(values), rel=1e-2)


def test_a_run_with_no_completed_request_still_reports(runs, tmp_path, capsys):
    """Stopped after some steps, before any request finished: the latency CDFs say so."""
    import shutil

    import pandas as pd

    run = tmp_path / "run"
    shutil.copytree(runs["released"], run)
    requests = pd.read_parquet(run / "requests.parquet")
    requests["status"] = "unfinished"
    requests.to_parquet(run / "requests.parquet")
    out = report(capsys, [run, "-o", tmp_path / "r"])
    assert "figures/latency_cdf.png" in out["figures"]


# --- odd runs: drawn where there is anything to draw, refused by name where not ------------

def edited(run, into, table, fmt="parquet", rows=None, **columns):
    """A copy of `run` whose `table` keeps `rows` (a slice; all when None), has `columns` set
    to the values given, and is written as `fmt`."""
    import shutil

    import pandas as pd

    copy = into / run.name
    shutil.copytree(run, copy)
    frame = pd.read_parquet(copy / f"{table}.parquet")
    (copy / f"{table}.parquet").unlink()
    frame = frame.iloc[rows] if rows is not None else frame
    for name, value in columns.items():
        frame[name] = value
    if fmt == "csv":
        frame.to_csv(copy / f"{table}.csv", index=False)
    else:
        frame.to_parquet(copy / f"{table}.parquet")
    return copy


@pytest.fixture(scope="module")
def odd(runs, tmp_path_factory):
    """A real run whose every request was rejected (one KV block; show says so), and copies
    of a plain run hand-edited as a report may find them."""
    import shutil

    import pandas as pd

    root = tmp_path_factory.mktemp("odd")
    (rejected,) = modeled_runs(root / "rejected", "engine.num_kv_blocks=1",
                               "trace.generate.prompt={fixed: 100}")
    plain = runs["released"]
    out = dict(rejected=rejected,
               no_requests=edited(plain, root / "no-requests", "requests", rows=slice(0, 0)))
    huge = edited(plain, root / "huge", "summary", value=1e308)
    requests = pd.read_parquet(huge / "requests.parquet")
    for name in requests.columns[requests.dtypes == np.float64]:
        requests[name] = 1e308
    requests.to_parquet(huge / "requests.parquet")
    out["huge"] = huge
    out["text_in_steps"] = edited(plain, root / "text-steps", "steps", t_end_s="x")
    out["text_in_requests_csv"] = edited(plain, root / "text-requests", "requests", "csv",
                                         ttft_s="x")
    out["fraction_step"] = edited(plain, root / "fraction", "steps", step=0.5)
    for name, table in (("null_run_id", dict(run_id=[None], at_capacity=[True])),
                        ("null_at_capacity", dict(run_id=[plain.name], at_capacity=[None]))):
        search = root / name
        search.mkdir()
        pd.DataFrame(table).to_parquet(search / "capacity.parquet")
        shutil.copytree(plain, search / plain.name)
        out[name] = search
    return out


def strictly(argv):
    """main(argv) where a numpy overflow, invalid value or division the code does not expect
    raises (FloatingPointError: a bug, exit 1) and any warning is an error, whatever filter
    the command line installs."""
    import warnings

    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise",
                                                divide="raise"):
        warnings.simplefilter("error")
        return main(argv)


@pytest.mark.parametrize("which, says", [
    ("rejected", "every request (12) was rejected"),
    ("no_requests", ""),
    ("huge", ""),
])
def test_an_odd_run_is_reported_with_what_can_be_drawn(odd, tmp_path, capsys, which, says):
    """Every request rejected (a documented outcome), an empty requests table, values of
    1e308: exit 0, nothing on stderr, each figure drawn or saying it has nothing to draw,
    and the page and the summary saying what `show` says."""
    assert strictly(["report", str(odd[which]), "-o", str(tmp_path / "r"), "--json",
                     "--trace-events"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    figures = json.loads(out)["figures"]
    assert {"figures/latency_cdf.png", "figures/prompt_vs_ttft.png"} <= set(figures)
    for name in figures:
        assert (tmp_path / "r" / name).read_bytes()[:4] == b"\x89PNG"
    (events,) = (tmp_path / "r" / "trace-events").iterdir()
    json.loads(events.read_text(), parse_constant=lambda c: pytest.fail(c))  # strict JSON
    for document in ("index.html", "summary.md"):
        assert says in (tmp_path / "r" / document).read_text()


@pytest.mark.parametrize("which, message", [
    ("text_in_steps", "steps.parquet: column t_end_s, row 1: expected a number, got 'x'"),
    ("text_in_requests_csv", "requests.csv: column ttft_s, line 2: expected a number, got 'x'"),
    ("fraction_step", "steps.parquet: column step, row 1: expected an integer, got 0.5"),
    ("null_run_id", "capacity.parquet: run_id, row 1 (the probe at capacity): expected a "
                    "probe's folder name, got no value (null)"),
    ("null_at_capacity", "capacity.parquet: column at_capacity, row 1: expected true or "
                         "false, got no value (null)"),
])
def test_a_column_of_the_wrong_kind_is_bad_input_naming_it(odd, tmp_path, capsys, which,
                                                           message):
    """Text where numbers belong, a fraction among integers, a null where a probe or a flag
    belongs: exit 2, one line naming the file, the column, the row and the value, nothing
    on stdout, nothing written."""
    assert strictly(["report", str(odd[which]), "-o", str(tmp_path / "r")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"steptrace: error: {odd[which]}") and err.endswith(message + "\n")
    assert list(tmp_path.iterdir()) == []


def test_a_run_on_dp_ranks_gets_the_ranks_figure(tmp_path, capsys):
    """docs/report.md: which ranks the steps wait for, where a run has modeled rank times
    on more than one DP rank (the one-rank runs above have no such figure)."""
    (run,) = modeled_runs(tmp_path / "dp", "deployment={devices: 8, attention: {dp: 8}, "
                          "moe: {ep: 8}}")
    capsys.readouterr()
    out = report(capsys, [run, "-o", tmp_path / "r"])
    assert "figures/ranks.png" in out["figures"]
    page = (tmp_path / "r" / "index.html").read_text()
    assert "DP ranks: who the step waits for" in page


# --- a P/D deployment's run (docs/disaggregation.md) --------------------------------------

@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    """A 2P1D run and its report; a 1P1D run of the same requests (`1p1d`)."""
    root = tmp_path_factory.mktemp("pd")
    (run,) = pd_runs(root / "2p1d")
    (one,) = pd_runs(root / "1p1d", "deployment.prefill.instances=1")
    assert main(["report", str(run), "-o", str(root / "r"), "--trace-events"]) == 0
    return {"run": run, "1p1d": one, "report": root / "r"}


def test_a_pd_run_gets_its_pools_and_transfers_drawn(pd, one):
    """Per pool, each instance's load and the requests routed to it; the transfers and
    the waits for decode room; DP ranks per pool. A co-located run has none of them."""
    figures = {p.stem for p in (pd["report"] / "figures").glob("*.png")}
    assert {"pools", "kv_transfer", "ranks", "load", "tokens_per_step", "step_time"} <= figures
    page = (pd["report"] / "index.html").read_text()
    for title in ("P/D pools: each instance&#39;s load and the requests routed to it",
                  "P/D: KV transfers and the wait for decode room"):
        assert title in page
    assert page.index('id="fig-load"') < page.index('id="fig-pools"') \
        < page.index('id="fig-kv_transfer"') < page.index('id="fig-tokens_per_step"')
    assert not {"pools.png", "kv_transfer.png"} & {p.name for p in (one / "figures").iterdir()}
    # the headline: how the pools did, as `steptrace show` prints it
    summary = (pd["report"] / "summary.md").read_text()
    for row in ("per_device input_tokens_per_prefill_device | tok/s",
                "per_device total_tokens | tok/s", "kv_transfer p99 | s",
                "decode_wait p99 | s", "prefill_mfu model | fraction",
                "decode_dp_imbalance lost_share | fraction"):
        assert f"| {row} |" in summary


def test_a_pd_runs_steps_are_grouped_by_instance(pd, runs):
    """Step numbers restart on every instance: a step is (role, instance, step), so that a
    figure's per-step sums never add one instance's step to another's."""
    import pandas as pd_

    from harness.analysis.report.figures.load import instance_steps, pool_over_time
    from harness.analysis.report.run_data import RunData
    from harness.analysis.report.timeline import per_step
    from harness.record.run import Run

    run = RunData(Run.read(pd["run"]))
    steps = pd_.read_parquet(pd["run"] / "steps.parquet")
    key = run.step_key()
    distinct = steps.groupby(["role", "instance", "step"], observed=True).ngroups
    assert len(np.unique(key)) == distinct > len(steps["step"].unique())
    _, summed = per_step(key, {"tokens_q": steps["tokens_q"].to_numpy()})
    by_hand = steps.groupby(["role", "instance", "step"], observed=True)["tokens_q"].sum()
    assert sorted(summed["tokens_q"]) == sorted(by_hand)
    # the pools over time: each instance's steps, its ranks summed
    prefill = instance_steps(run, "prefill", ["running"])
    assert [i for i, _, _ in prefill] == [0, 1]
    for instance, t, v in prefill:
        mine = steps[(steps.role == "prefill") & (steps.instance == instance)]
        assert len(t) == mine["step"].nunique()
        assert v["running"].sum() == mine["running"].sum()
    t, v = pool_over_time(run, "decode", ["running"])
    assert len(t) and v["running"].max() <= steps[steps.role == "decode"].groupby(
        "step")["running"].sum().max()
    # a co-located run's key is its step number
    colocated = RunData(Run.read(runs["released"]))
    assert (colocated.step_key() == colocated.columns("steps", ["step"])["step"]).all()


def test_instances_states_are_held_between_their_steps_and_summed():
    """held_sum: instance A steps at 0, 1, 2, 3 (1 running each time), B at 0 and 3 (5,
    then 7): over 3 bins B's 5 holds through the middle bin, where it ran no step."""
    from harness.analysis.report.timeline import held_sum

    a = (np.array([0.0, 1.0, 2.0, 3.0]), {"running": np.ones(4)})
    b = (np.array([0.0, 3.0]), {"running": np.array([5.0, 7.0])})
    t, v = held_sum([a, b], bins=3)
    assert list(t) == [0.5, 1.5, 2.5] and list(v["running"]) == [6.0, 6.0, 8.0]


def test_a_pd_runs_ranks_and_trace_events_are_per_instance(pd):
    """The DP-rank figure has a row per pool, over its instances' steps; the trace events a
    process per instance and rank, on which steps follow one another."""
    from harness.analysis.report.figures.ranks import _by_step, _ranked
    from harness.analysis.report.run_data import RunData
    from harness.record.run import Run

    run = RunData(Run.read(pd["run"]))
    assert _ranked(run) == ["prefill", "decode"]
    prefill = _by_step(run, "prefill")
    assert len(prefill["slowest"]) == 24 and set(prefill["ranks"]) == {2}
    assert set(prefill["phase"]) == {"prompt"}
    assert set(_by_step(run, "decode")["phase"]) == {"decode"}
    (events,) = (pd["report"] / "trace-events").iterdir()
    data = json.loads(events.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in data if e["ph"] == "M"}
    assert sorted(names.values()) == sorted(f"{role} {i}, DP rank {r}" for role, n in
                                            (("prefill", 2), ("decode", 1))
                                            for i in range(n) for r in range(2))
    for pid in names:
        spans = [e for e in data if e["ph"] == "X" and e["pid"] == pid
                 and e["name"].endswith(" step")]
        assert spans and all(b["ts"] >= a["ts"] + a["dur"] - 1e-6
                             for a, b in zip(spans, spans[1:]))


def test_a_pd_deployment_against_a_colocated_one_on_the_hardware_page(pd, runs, tmp_path,
                                                                       capsys):
    """docs/report.md: per-device figures over every device of both pools, each arm's
    deployment named (xPyD and each pool's layout), the pools' rows beside."""
    out = report(capsys, [runs["released"], pd["run"], "-o", tmp_path / "r"])
    assert out["arms"] == ["H200 (modeled), co-located", "H800 (modeled), 2P1D"]
    page = (tmp_path / "r" / "index.html").read_text()
    hardware = page[page.index('id="hardware"'):page.index('id="figures"')]
    assert "<h2>Hardware comparison</h2>" in hardware
    assert "<td>8 H200 (attention TP8, dense TP8)</td>" in hardware.replace(' class="unit"', "")
    assert "<td>2P1D: prefill 2 x 2 H800 (DP2, EP2), decode 1 x 2 H800 (DP2, EP2)</td>" in \
        hardware.replace(' class="unit"', "")
    cells = dict(re.findall(r"<tr><td>([^<]+)</td><td class=\"unit\">[^<]*</td>(.*?)</tr>",
                            hardware))
    values = lambda name: re.findall(r"<td>([^<]*)</td>", cells[name])  # noqa: E731
    assert values("devices")[:2] == ["8", "6"]  # 2 x 2 prefill + 1 x 2 decode devices
    from harness.analysis.report.headline import fmt
    from harness.record.run import Run

    a, b = Run.read(runs["released"]), Run.read(pd["run"])
    for name, metric in (("output tokens per device", "throughput.output_tokens"),
                         ("total tokens per device", "throughput.total_tokens")):
        assert values(name)[:2] == [fmt(a.value(metric) / 8), fmt(b.value(metric) / 6)]
    assert values("total tokens per device")[1] == fmt(b.value("per_device.total_tokens"))
    assert values("per_device output_tokens_per_decode_device")[:2] == \
        ["–", fmt(b.value("per_device.output_tokens_per_decode_device"))]
    assert values("mfu model")[1] == "–" and values("decode_mfu model")[0] == "–"
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "- H800 (modeled), 2P1D: modeled; 2P1D: prefill 2 x 2 H800 (DP2, EP2), decode 1 x 2 " \
        "H800 (DP2, EP2)\n" in summary


def test_two_pd_deployments_on_one_device_get_the_deployment_page(pd, tmp_path, capsys):
    """Both sides P/D, on one device: the arms are named by their deployments, and the page
    compares them per device (6 devices against 4)."""
    out = report(capsys, [pd["run"], pd["1p1d"], "-o", tmp_path / "r"])
    assert out["arms"] == ["2P1D", "1P1D"]
    page = (tmp_path / "r" / "index.html").read_text()
    hardware = page[page.index('id="hardware"'):page.index('id="figures"')]
    assert "<h2>Deployment comparison</h2>" in hardware
    assert "The arms differ by deployment." in hardware and '<a href="#hardware">Deployment' in page
    assert "1P1D: prefill 1 x 2 H800 (DP2, EP2), decode 1 x 2 H800 (DP2, EP2)" in hardware
    assert re.search(r"<tr><td>devices</td><td class=\"unit\">devices</td><td>6</td><td>4</td>",
                     hardware)
    figures = out["figures"]  # each arm's first run's pools, one row each
    assert "figures/pools.png" in figures and "figures/kv_transfer.png" in figures


def test_a_pools_device_is_text_on_the_page(pd, runs, tmp_path, capsys):
    """A manifest's pool device (user-controlled, as every manifest string) is shown as
    text in both documents, in the layout and in the profile's note."""
    import shutil

    run = shutil.copytree(pd["run"], tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["values"]["deployment"]["decode"]["device"] = "modeled:<b>x</b>"
    (run / "manifest.json").write_text(json.dumps(manifest))
    report(capsys, [runs["released"], run, "-o", tmp_path / "r"])
    page = (tmp_path / "r" / "index.html").read_text()
    assert "<b>x</b>" not in page
    assert "decode 1 x 2 &lt;b&gt;x&lt;/b&gt; (DP2, EP2)" in page
    assert "The decode pool runs on &lt;b&gt;x&lt;/b&gt;, whose figures" in page
    assert "<b>x</b>" not in (tmp_path / "r" / "summary.md").read_text()


def test_an_emulated_device_is_named_as_emulated(runs, tmp_path, capsys):
    """A run on `device: emulated:H200` measured the host's CPU doing the device's work:
    `show`'s headline, the report's subtitle and its badges name the emulated H200 and the
    host, never "measured, device x86_64"."""
    import shutil

    run = shutil.copytree(runs["released"], tmp_path / "emulated")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(modeled=False, modeled_device=None, executor="emulated:H200",
                    executor_kind="emulated", profile="H200",
                    device=dict(backend="cpu", name="x86_64", chip="x86_64", capability=None))
    (run / "manifest.json").write_text(json.dumps(manifest))
    label = "H200 (emulated on x86_64: the host's CPU doing its work)"
    assert main(["show", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(f"device {label}, gil released")
    assert main(["show", "--json", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == label
    assert main(["report", str(run), "-o", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "index.html").read_text()
    subtitle = re.search(r'<div class="sub">(.*?)</div>', page, re.S).group(1)
    assert subtitle.endswith(label.replace("'", "&#39;"))
    badges = set(re.findall(r'<span class="badge [a-z]+">([a-z]+)</span>', page))
    assert "emulated" in badges and "measured" not in badges and "modeled" not in badges
