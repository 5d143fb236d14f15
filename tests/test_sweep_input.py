"""A sweep's input and its searches as a careless or hostile user writes them (issue 42):
`where` that overflows, nests without end or compares a section with a number; grids,
searches and worker counts far beyond what a sweep can run; an optuna study under an
output whose name a URL would read otherwise, or whose `study.db` is not one; a sweep whose
name YAML would read as a mapping. Each is bad input (exit 2, one line naming the file and
key) or runs as written; nothing hangs. No point runs here: a task that fails each point at
once stands in for run_point."""

import json
import os
import sys
import time
import tracemalloc
from contextlib import contextmanager

import psutil
import pytest

from harness.commands import main
from harness.sweeps.points import pd_ratio
from harness.sweeps.points.answer import empty_answer
from harness.sweeps.points.execute import plan
from harness.sweeps.points.expand import MAX_POINTS, count, drawn, grid, sample
from harness.sweeps.points.sweep_file import SweepError, load_sweep
from harness.sweeps.points.where import compile_where
from harness.sweeps.points.workers import WORKER_BYTES, workers
from harness.workload import load_workload
from tests.helpers import within
from tests.test_sweep_points import sweep_file
from tests.test_sweep_run import InProcess

if sys.platform == "win32":  # FIFOs and SIGALRM: POSIX only
    pytestmark = pytest.mark.skip("POSIX only")

AXES = "base: base.yaml\naxes:\n  engine.max_num_seqs: [4, 8]\n  engine.num_mtp: [0, 1]\n"
OPTUNA = AXES + "search: {method: optuna, n: 10000, objective: goodput}\n"


def sweep(capsys, path, out, *args):
    """`steptrace sweep PATH --set output=OUT ARGS --json`: its status, its JSON document
    and its stderr."""
    with within(60):
        status = main(["sweep", str(path), "--set", f"output={out}", *map(str, args), "--json"])
    got, err = capsys.readouterr()
    return status, json.loads(got), err


def bad_input(capsys, tmp_path, text, *words, args=()):
    """The sweep file `text` exits 2 before anything runs: one line naming every word."""
    status, document, err = sweep(capsys, sweep_file(tmp_path, text), tmp_path / "out", *args)
    assert status == 2 and document["exit_code"] == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"
    return err


def failing(point):
    """A point's task that fails at once: what the search does, not what a run measures."""
    return dict(empty_answer(), status="failed", reason="not run here")


# ---------------------------------------------------------------- where

@pytest.mark.parametrize("where", [
    "engine.max_num_seqs * 1e308 * 10 > 1",
    "9" * 400 + " / engine.max_num_seqs > 1",  # an integer no double holds
    "engine.max_num_seqs" + " * 99999999999" * 40 + " > 1",  # grows without end as integers
])
def test_where_arithmetic_that_overflows_is_bad_input(capsys, tmp_path, where):
    bad_input(capsys, tmp_path, AXES + f"where: {json.dumps(where)}\n", "s.yaml", "where: ",
              "overflows: expected arithmetic whose result is a finite number")


@pytest.mark.parametrize("where, said", [
    ("not " * 20_000 + "engine.num_mtp", "s.yaml:5: where: 'not not not"),
    ("-" * 5_000 + "engine.num_mtp > 1", "nested deeper than 100 levels"),
    ("engine.num_mtp" + " + 1" * 2_000 + " > 1", "nested deeper than 100 levels"),
    ("(" * 20_000 + "engine.num_mtp" + ")" * 20_000, "at most 10,000 characters, got 40,014"),
])
def test_where_nested_deeply_is_bad_input_at_once(capsys, tmp_path, where, said):
    err = bad_input(capsys, tmp_path, AXES + f"where: {json.dumps(where)}\n", said)
    assert len(err) < 400  # the expression cut short, with its length


@pytest.mark.parametrize("text, said", [
    (AXES + "where: engine == 1\n", "engine is a mapping (a section: compare one of its "
                                    "keys, engine.KEY), not comparable with 1"),
    ("base: base.yaml\naxes:\n  engine: [{max_num_seqs: 4}, {max_num_seqs: 8}]\n"
     "where: engine != 2\n", "engine is a mapping"),
    (AXES + "where: 1 < slo\n", "slo is a mapping"),
])
def test_where_comparing_a_section_with_a_number_names_it(capsys, tmp_path, text, said):
    """Every point was left out, silently: a mapping is never equal to a number."""
    bad_input(capsys, tmp_path, text, "s.yaml: where: ", said)


@pytest.mark.parametrize("literal, said", [
    ("9" * 5_000, "got an integer of 5,000 digits (999999"),
    ("0x" + "f" * 5_000, "got an integer of about 6,021 digits (0xffffff"),
])
def test_where_holding_an_integer_of_thousands_of_digits_names_it(capsys, tmp_path, literal,
                                                                   said):
    """Python's parser refused it with advice to raise the interpreter's limit."""
    err = bad_input(capsys, tmp_path, AXES + f"where: engine.num_mtp < {literal}\n",
                    "s.yaml:5: where: 'engine.num_mtp < ", "expected numbers of at most 4,300 "
                    "digits", said)
    assert len(err) < 400 and "set_int_max_str_digits" not in err


@pytest.mark.parametrize("where, said", [
    ("engine.max_num_seqs < 'a'", "engine.max_num_seqs < 'a': expected two numbers or two "
                                  "strings to order, got 4 (a number) and 'a' (a string)"),
    ("1 < 2 <= device", "2 <= device: expected two numbers or two strings to order, got 2 (a "
                        "number) and 'modeled:B200' (a string)"),
])
def test_where_ordering_a_number_and_a_string_names_the_comparison(capsys, tmp_path, where,
                                                                    said):
    """Python's "'<' not supported between instances of 'int' and 'str'" named neither."""
    err = bad_input(capsys, tmp_path, AXES + f"where: {json.dumps(where)}\n",
                    f"s.yaml: where: {where!r}: at {{", said)
    assert "not supported" not in err


def test_where_failing_on_an_optunas_draw_is_bad_input(capsys, tmp_path):
    text = ("base: base.yaml\naxes:\n  engine: [{max_num_seqs: 4}, {max_num_seqs: 8}]\n"
            "where: engine == 1\nsearch: {method: optuna, n: 4, objective: goodput}\n")
    bad_input(capsys, tmp_path, text, "s.yaml: where: 'engine == 1': at ",
              "engine is a mapping")


# ---------------------------------------------------------------- a point twice

@pytest.mark.parametrize("text, said", [
    ("base: base.yaml\naxes: {engine.max_num_seqs: [8, 8]}\n",
     "s.yaml:2: axes.engine.max_num_seqs: 8 is given twice (values 1 and 2): each value "
     "once, or the point is listed twice"),
    (AXES + "  engine.num_kv_blocks: [64, 128, 64]\n", "s.yaml:5: axes.engine.num_kv_blocks: "
                                                      "64 is given twice (values 1 and 3)"),
    ("base: base.yaml\naxes:\n  engine.max_num_seqs: [4, 8, 4]\n  engine.num_mtp: [0, 1, 0]\n"
     "zip: [[engine.max_num_seqs, engine.num_mtp]]\n",
     "s.yaml:5: zip: group 1: engine.max_num_seqs=4, engine.num_mtp=0 is given twice (values "
     "1 and 3): each combination once"),
])
def test_a_point_given_twice_is_bad_input(capsys, tmp_path, text, said):
    """It ran once and was listed twice, two identical rows."""
    bad_input(capsys, tmp_path, text, said)


def test_a_zip_groups_axis_may_repeat_a_value_its_partner_does_not(tmp_path):
    sweep = load_sweep(sweep_file(tmp_path, (
        "base: base.yaml\naxes:\n  engine.max_num_seqs: [4, 4, 8]\n"
        "  engine.num_mtp: [0, 1, 1]\n  engine.num_kv_blocks: [64, 64.0]\n"
        "zip: [[engine.max_num_seqs, engine.num_mtp]]\n")))
    assert len(grid(sweep.axes, sweep.zips)) == 6  # 64 and 64.0: two values, as YAML reads them


@pytest.mark.parametrize("text, devices", [
    (AXES, "modeled:B200"),
    ("base: base.yaml\naxes: {device: [modeled:B200, modeled:H200]}\n", "modeled:B200, "
                                                                       "modeled:H200"),
    (OPTUNA, "modeled:B200"),
])
def test_a_price_of_a_device_no_point_uses_is_bad_input(capsys, tmp_path, text, devices):
    """It was silently ignored: a misspelt device's price never reached the table."""
    text += "prices:\n  modeled:B200: 5.5\n  modeled:XYZ: 3\n"
    line = text.count("\n")  # the last line
    bad_input(capsys, tmp_path, text, f"s.yaml:{line}: prices.modeled:XYZ: no point of the "
                                      f"sweep runs on modeled:XYZ: expected a device its "
                                      f"points use ({devices})")


# ---------------------------------------------------------------- sweeps too large

# eight axes of 10 values: a grid of 10^8 points
HUGE = "base: base.yaml\naxes:\n" + "".join(
    f"  {key}: [{', '.join(str(v) for v in range(1, 11))}]\n" for key in (
        "engine.max_num_seqs", "engine.num_kv_blocks", "engine.max_num_batched_tokens",
        "engine.num_mtp", "trace.generate.requests", "trace.generate.rate",
        "calibration_requests", "slo.ttft"))


def test_a_grid_too_large_is_counted_before_it_is_expanded(capsys, tmp_path):
    bad_input(capsys, tmp_path, HUGE,
              "s.yaml:2: axes: the grid holds 100,000,000 points (10 x 10 x 10 x 10 x 10 x "
              "10 x 10 x 10), more than a sweep plans (10,000)", "method: random", "optuna")


def test_a_random_search_draws_from_a_grid_too_large_to_expand(tmp_path):
    """Random search sampled the grid before resolving: a cap on the grid refused it."""
    path = sweep_file(tmp_path, HUGE + "search: {method: random, n: 2, seed: 3}\n")
    tracemalloc.start()
    try:
        start = time.perf_counter()
        points = plan(path, (f"output={tmp_path / 'out'}",)).points
        elapsed, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(points) == 2 and points != plan(path, (f"output={tmp_path / 'o'}",)).points
    assert elapsed < 5 and peak < 50 * 2**20, (elapsed, peak)  # two points resolved, no grid


def test_a_random_search_draws_what_the_expanded_grid_gave():
    """The same seed draws the same points from a grid beyond MAX_POINTS as when the grid
    was expanded and sampled; a `where` keeps only what it holds for, and ends when it
    holds for none."""
    axes = {"a": list(range(300)), "b": list(range(40)), "c": [f"c{i}" for i in range(40)],
            "d": ["x", "y"]}
    zips = [["b", "c"]]  # 300 x 40 x 2
    assert count(axes, zips) > MAX_POINTS
    assert drawn(axes, zips, 5, 11, None) == sample(grid(axes, zips), 5, 11)
    assert drawn(axes, zips, 3, 11, None) != drawn(axes, zips, 3, 12, None)
    kept_ = drawn(axes, zips, 4, 1, compile_where("b == 7 and d == 'y'", axes))
    assert len(kept_) == 4 and all((p["b"], p["c"], p["d"]) == (7, "c7", "y") for p in kept_)
    assert kept_ == sorted(kept_, key=lambda p: p["a"])  # the grid's order
    assert drawn({"a": list(range(MAX_POINTS + 1))}, (), 1, 0,
                 compile_where("a < 0", ["a"])) == []  # every index looked at, none kept


def test_a_random_search_beyond_the_grid_limit_filters_by_axes_alone(capsys, tmp_path):
    bad_input(capsys, tmp_path, HUGE + "where: model == 'tiny'\nsearch: {method: random, n: 2}\n",
              "s.yaml:11: where: \"model == 'tiny'\": a random search over more than 10,000 "
              "points (100,000,000) draws them unexpanded, filtered by axes alone, not model")


def test_a_grid_at_the_limit_is_planned(tmp_path):
    path = sweep_file(tmp_path, "base: base.yaml\naxes:\n  engine.max_num_seqs: "
                      f"{list(range(1, 101))}\n  engine.num_kv_blocks: {list(range(1, 101))}\n"
                      "where: engine.max_num_seqs == 1\n")
    assert MAX_POINTS == 100 * 100
    assert len(plan(path, (f"output={tmp_path / 'out'}",)).points) == 100


@pytest.mark.parametrize("search, said", [
    ("{method: optuna, n: 100000, objective: goodput}", "s.yaml:6: search.n: expected an "
                                                        "integer <= 10,000"),
    ("{method: random, n: 100000}", "s.yaml:6: search.n: expected an integer <= 10,000"),
])
def test_a_search_of_too_many_points_is_bad_input(capsys, tmp_path, search, said):
    bad_input(capsys, tmp_path, AXES + f"mode: capacity\nsearch: {search}\n", said,
              "got 100,000")


@pytest.mark.parametrize("digits, said", [
    (4_000, "s.yaml:6: search.n: expected an integer <= 10,000, the most a sweep takes, got "
            "about 10^3999"),
    (5_000, "s.yaml: expected numbers of at most 4,300 digits, got a longer integer"),
])
def test_an_integer_of_thousands_of_digits_is_named_short(capsys, tmp_path, digits, said):
    err = bad_input(capsys, tmp_path, AXES + f"mode: capacity\nsearch: {{method: random, n: "
                                             f"{'9' * digits}}}\n", said)
    assert len(err) < 400 and "set_int_max_str_digits" not in err


def test_a_pd_ratio_search_too_wide_names_near(capsys, tmp_path):
    text = AXES + "mode: capacity\nsearch: {method: pd_ratio, near: 1000000}\n"
    bad_input(capsys, tmp_path, text, "s.yaml:6: search.near: expected an integer <= 16",
              "got 1,000,000")


def test_a_pd_ratio_search_plans_no_more_than_most_allows(tmp_path):
    path = sweep_file(tmp_path, AXES + "mode: capacity\nsearch: {method: pd_ratio, near: 16, "
                                       "most: 3}\n")
    the_plan = plan(path, (f"output={tmp_path / 'out'}",))
    assert pd_ratio.planned(the_plan) == len(the_plan.unique) * (2 + 3)


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.setattr("harness.sweeps.points.workers.cores", lambda: 2)


def available(monkeypatch, workers_held: float):
    """The host's available memory: enough for `workers_held` workers."""
    memory = psutil.virtual_memory()._replace(available=int(workers_held * WORKER_BYTES))
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory)


def test_workers_are_at_most_the_points_and_one_a_core(two_cores, capsys, monkeypatch):
    """Two a core gave 128 interpreters (about 38 GB) on 64 cores, for points of one
    CPU-bound thread each."""
    available(monkeypatch, 1000)
    assert workers(10_000, 40) == 2
    assert "--workers 10000: 2 at once, one a core of the 2 this host gives the sweep" \
        in capsys.readouterr().err
    assert (workers(10_000, 1), workers(1, 40), workers(1, 0)) == (1, 1, 1)
    assert workers(10_000, 40, on_this_host=False) == 40  # a Ray cluster's CPUs bound it
    assert capsys.readouterr().err == ""


def test_workers_are_as_many_as_the_available_memory_holds(capsys, monkeypatch):
    monkeypatch.setattr("harness.sweeps.points.workers.cores", lambda: 64)
    available(monkeypatch, 3.5)
    assert workers(64, 100) == 3
    assert f"--workers 64: 3 at once, what the {3.5 * WORKER_BYTES / 2**30:.1f} GiB of " \
           f"memory available holds at 300 MiB a worker" in capsys.readouterr().err
    available(monkeypatch, 0.2)
    assert workers(64, 100) == 1  # one, however little is free: the sweep runs


def test_the_sweep_starts_no_more_workers_than_the_host_takes(two_cores, capsys, tmp_path,
                                                              monkeypatch):
    started = []

    @contextmanager
    def host_pool(n):
        started.append(n)
        yield InProcess()
    available(monkeypatch, 1000)
    monkeypatch.setattr("harness.sweeps.points.pool.host_pool", host_pool)
    monkeypatch.setattr("harness.sweeps.points.pool.run_unless_stopped", failing)
    text = AXES.replace("[0, 1]", "[0, 1, 2]") + "  trace.generate.requests: [3, 4]\n"
    status, document, err = sweep(capsys, sweep_file(tmp_path, text), tmp_path / "out",
                                  "--workers", 10_000)
    assert started == [2] and document["points"] == 12, err
    assert "--workers 10000: 2 at once" in err


def test_by_default_the_sweep_takes_the_cores_it_is_given_and_says_nothing(
        two_cores, capsys, tmp_path, monkeypatch):
    started = []

    @contextmanager
    def host_pool(n):
        started.append(n)
        yield InProcess()
    monkeypatch.setattr("os.cpu_count", lambda: 64)  # the machine's, not this process's
    available(monkeypatch, 1000)
    monkeypatch.setattr("harness.sweeps.points.pool.host_pool", host_pool)
    monkeypatch.setattr("harness.sweeps.points.pool.run_unless_stopped", failing)
    text = AXES.replace("[0, 1]", "[0, 1, 2]") + "  trace.generate.requests: [3, 4]\n"
    status, document, err = sweep(capsys, sweep_file(tmp_path, text), tmp_path / "out")
    assert started == [2] and "at once" not in err, err


@pytest.mark.parametrize("n", [0, -1])
def test_workers_below_one_are_bad_input(capsys, tmp_path, n):
    bad_input(capsys, tmp_path, AXES, "--workers: expected an integer >= 1", args=("--workers", n))


# ---------------------------------------------------------------- optuna

def test_optuna_stops_once_every_point_is_drawn(tmp_path):
    pytest.importorskip("optuna", reason="Optuna is not installed: the optuna extra")
    from harness.sweeps.points.optuna_search import search

    the_plan = plan(sweep_file(tmp_path, OPTUNA), (f"output={tmp_path / 'out'}",))
    counts = []
    with within(60):  # n draws of 4 points took hours
        rows = search(the_plan, InProcess(), failing, progress=counts.append, batch=2)
    assert sorted(json.loads(r["axes"])["engine.max_num_seqs"] for r in rows) == [4, 4, 8, 8]
    last = counts[-1]  # the draws made, a point drawn again among them, of as many
    assert last["left"] == 0 and last["total"] == sum(last[k] for k in (
        "done", "skipped", "failed", "refused")) < 10_000


def test_optuna_stops_where_where_rejects_every_point(tmp_path):
    pytest.importorskip("optuna", reason="Optuna is not installed: the optuna extra")
    from harness.sweeps.points.optuna_search import SearchError, search

    path = sweep_file(tmp_path, OPTUNA + "where: engine.num_mtp > 5\n")
    with within(60), pytest.raises(SearchError, match="rejected every one of the 4 points"):
        search(plan(path, (f"output={tmp_path / 'out'}",)), InProcess(), failing)


@pytest.mark.parametrize("name", ["out?x", "q?mode=ro", "a#b", "a%20b", "a b", "{x}", "100%"])
def test_the_study_lands_in_the_sweeps_folder_whatever_the_output_is_named(tmp_path, name):
    """The path went into an SQLite URL as it was: `out?x` made the file `out`."""
    pytest.importorskip("optuna", reason="Optuna is not installed: the optuna extra")
    from harness.sweeps.points.optuna_search import STUDY, search

    the_plan = plan(sweep_file(tmp_path, OPTUNA.replace("10000", "2")),
                    (f"output={tmp_path / name}",))
    assert the_plan.folder == tmp_path / name / "s"
    assert len(search(the_plan, InProcess(), failing)) == 2
    assert (the_plan.folder / STUDY).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["base.yaml", "s.yaml", name])
    assert [p.name for p in the_plan.folder.iterdir()] == [STUDY]


@pytest.mark.parametrize("kind, said", [
    ("fifo", "is a FIFO (named pipe), not a regular file"),
    ("folder", "is a directory, not a regular file"),
    ("link", "is a symbolic link"),
    ("garbage", "cannot read the search's study there (file is not a database): run with "
                "--fresh"),
])
def test_a_study_that_is_not_one_is_named_never_opened(capsys, tmp_path, kind, said):
    pytest.importorskip("optuna", reason="Optuna is not installed: the optuna extra")
    folder = tmp_path / "out" / "s"
    folder.mkdir(parents=True)
    study = folder / "study.db"
    if kind == "fifo":
        os.mkfifo(study)
    elif kind == "folder":
        study.mkdir()
    elif kind == "link":
        study.symlink_to(tmp_path / "elsewhere.db")
    else:
        study.write_bytes(b"not a database" * 300)
    bad_input(capsys, tmp_path, OPTUNA, f"{study}: ", said)
    assert not (tmp_path / "elsewhere.db").exists()
    if kind != "garbage":  # --fresh deletes the study the sweep stored, nothing else
        bad_input(capsys, tmp_path, OPTUNA, said, args=("--fresh",))
        assert study.is_symlink() or study.exists()


# ---------------------------------------------------------------- the sweep's name

@pytest.mark.parametrize("name", ["mtp: on", "my results #1", "- x"])
def test_a_points_output_is_its_folder_whatever_the_sweep_is_named(tmp_path, name):
    """`output=<folder>/mtp: on/points/<key>` was read as a mapping: every point failed."""
    path = sweep_file(tmp_path, f"name: {json.dumps(name)}\n" + AXES)
    the_plan = plan(path, (f"output={tmp_path / 'out'}",))
    assert the_plan.folder == tmp_path / "out" / name
    for point in the_plan.unique:
        assert load_workload(point.workload, point.overrides).values["output"] == \
            str(point.folder)


@pytest.mark.parametrize("name, said", [
    ("on", "s.yaml:1: name: expected a folder name, a string, got True (YAML reads it as a "
           "bool: quote it"),
    ("12", "s.yaml:1: name: expected a folder name, a string, got 12"),
    ("{mtp: on}", "s.yaml:1: name: expected a folder name, a string, got {'mtp': True}"),
])
def test_a_sweep_name_that_is_no_text_is_named(tmp_path, name, said):
    with pytest.raises(SweepError) as e:
        load_sweep(sweep_file(tmp_path, f"name: {name}\n" + AXES))
    assert said in str(e.value)

