"""steptrace sweep's points run in this process (an executor that runs each task as it is
submitted): resume, a failed point recorded while the others go on, a partial folder run
again, refused points in the table, the table as declared, capacity mode; and the command's
bad input, refused before anything runs."""

import json
import sys
from concurrent.futures import Executor, Future

import pyarrow.parquet as pq
import pytest

from harness.commands import main
from harness.record.table_sink import write_table
from harness.schema import arrow_schema
from harness.sweeps.points import marker, task
from harness.sweeps.points.answer import empty_answer
from harness.sweeps.points.execute import execute, plan
from harness.sweeps.points.table import table
from tests.test_sweep_points import TINY, sweep_file

GRID = """base: base.yaml
axes:
  engine.max_num_batched_tokens: [64, 256]
  device: [modeled:B200, modeled:H200]
  engine.num_kv_blocks: [256, 0]
where: engine.max_num_batched_tokens == 64 or engine.num_kv_blocks > 0
"""


class InProcess(Executor):
    """Each task run at once, here; its result or exception in its future."""

    def __init__(self):
        self.ran = []

    def submit(self, fn, *args, **kwargs):
        self.ran.append(args[0].key)
        future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - as a pool's future holds it
            future.set_exception(e)
        return future


@pytest.fixture
def grid_plan(tmp_path):
    return plan(sweep_file(tmp_path, GRID), (f"output={tmp_path / 'out'}",))


@pytest.mark.parametrize("devices, kept", [(1, 1), (2, 2)])
def test_a_where_naming_a_key_beside_the_axes_judges_each_resolved_point(tmp_path, devices,
                                                                          kept):
    text = """base: base.yaml
axes:
  deployment.attention.dp: [1, 2, 4]
  engine.max_num_seqs: [8, 16]
where: deployment.devices == deployment.attention.dp and engine.max_num_seqs > 8
"""
    the_plan = plan(sweep_file(tmp_path, text),
                    (f"output={tmp_path / 'out'}", f"deployment.devices={devices}"))
    # the others dropped, those that are no valid workload (DP wider than the devices) too
    assert [p.axes for p in the_plan.points] == [
        {"deployment.attention.dp": kept, "engine.max_num_seqs": 16}]


def test_refused_points_are_listed_before_any_work_and_kept_in_the_table(grid_plan):
    assert len(grid_plan.points) == 6 and len(grid_plan.unique) == 4
    assert [p.axes for p in grid_plan.refused] == [
        {"engine.max_num_batched_tokens": 64, "device": d, "engine.num_kv_blocks": 0}
        for d in ("modeled:B200", "modeled:H200")]
    assert all("engine.num_kv_blocks" in p.reason for p in grid_plan.refused)
    assert not (grid_plan.folder / "points").exists()


def test_a_sweep_runs_every_point_once_and_resumes_without_running_one_again(grid_plan):
    first = InProcess()
    rows = execute(grid_plan, first)
    assert [r["status"] for r in rows] == ["done", "refused"] * 2 + ["done"] * 2
    assert sorted(first.ran) == sorted(p.key for p in grid_plan.unique)
    stamps = {p.key: (p.folder / marker.MARKER).stat().st_mtime_ns for p in grid_plan.unique}
    again = InProcess()
    resumed = execute(grid_plan, again)
    assert again.ran == [] and all(r["skipped"] for r in resumed if r["status"] == "done")
    assert stamps == {p.key: (p.folder / marker.MARKER).stat().st_mtime_ns
                      for p in grid_plan.unique}
    assert [r["output_tokens_per_s"] for r in resumed] == [r["output_tokens_per_s"] for r in rows]
    fresh = InProcess()
    execute(grid_plan, fresh, fresh=True)
    assert sorted(fresh.ran) == sorted(first.ran)


def test_a_failed_point_is_recorded_and_the_others_go_on(grid_plan, monkeypatch):
    run = task._run

    def fails_on_h200(workload):
        if workload.values["device"] == "modeled:H200":
            raise RuntimeError("no such luck")
        return run(workload)
    monkeypatch.setattr(task, "_run", fails_on_h200)
    rows = execute(grid_plan, InProcess())
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 2 and {r["reason"] for r in failed} == {"RuntimeError: no such luck"}
    assert sum(r["status"] == "done" for r in rows) == 2
    assert all(marker.read(grid_plan.folder / r["folder"]) is None for r in failed)
    monkeypatch.setattr(task, "_run", run)
    again = InProcess()
    assert all(r["status"] != "failed" for r in execute(grid_plan, again))
    assert len(again.ran) == 2  # the failed points ran again; the done ones did not


def test_a_partial_folder_is_not_taken_for_complete(grid_plan):
    point = grid_plan.unique[0]
    (point.folder / "base" / "torn-run").mkdir(parents=True)
    (point.folder / marker.MARKER).write_text('{"status": "do')  # cut short
    executor = InProcess()
    execute(grid_plan, executor)
    assert point.key in executor.ran and not (point.folder / "base" / "torn-run").exists()
    assert len(list((point.folder / "base").iterdir())) == 1


def test_the_table_is_written_as_declared_with_its_front(grid_plan):
    df = table(execute(grid_plan, InProcess()))
    path = write_table(df, grid_plan.folder, "sweep", "parquet")
    assert pq.read_schema(path).remove_metadata() == arrow_schema("sweep")
    done = df[df["status"] == "done"]
    # 64 and 256 batched tokens tie on this trace: neither beats the other
    assert list(df["pareto"]) == [True, False, True, False, True, True]
    assert (done["tokens_per_s_per_user"] == 1 / done["tpot_p50_s"]).all()
    assert json.loads(df["axes"][0]) == {"engine.max_num_batched_tokens": 64,
                                         "device": "modeled:B200", "engine.num_kv_blocks": 256}


@pytest.mark.slow  # a capacity search of 400 requests
def test_capacity_mode_answers_with_the_capacity_searchs_result(tmp_path):
    # 400 requests: the run at the answer reaches a steady state (the length check asks)
    base = TINY.replace("requests: 12", "requests: 400") + "slo: {ttft: 0.002}\n"
    path = sweep_file(tmp_path, "base: base.yaml\nmode: capacity\naxes: {device: "
                                "[modeled:B200]}\n", base)
    (row,) = execute(plan(path, (f"output={tmp_path}",)), InProcess())
    assert row["status"] == "done" and row["outcome"] in ("capacity", "at_least")
    assert row["rate"] > 0 and row["attainment"] >= 0.9 and row["concurrency"] is None
    assert "/capacity/" in row["run_dir"]


@pytest.mark.parametrize("text, args, said", [
    ("base: base.yaml\naxes: {device: [a], engine.num_mtp: [0, 1]}\n"
     "zip: [[device, engine.num_mtp]]\n", [], "s.yaml:3: zip: group 1"),
    ("base: base.yaml\naxes: {device: [a]}\nsearch: {method: optuna, n: 0}\n", [],
     "s.yaml:3: search.n: expected an integer >= 1, got 0"),
    ("base: base.yaml\naxes: {device: [a]}\nray: {address: 6379}\n", [],
     "s.yaml:3: ray.address: expected a Ray cluster's address (host:port), got 6379"),
    ("base: base.yaml\naxes: {device: [a]}\nray: 127.0.0.1:6379\n", [],
     "s.yaml:3: ray: expected a mapping with one key, address"),
    ("base: base.yaml\naxes: {engine.num_mtp: [0]}\nwhere: engine.num_mtp < 'a'\n", [],
     "s.yaml: where: \"engine.num_mtp < 'a'\": at {'engine.num_mtp': 0}"),
    ("base: base.yaml\naxes: {device: [a]}\n", ["--set", "engine.num_mtp=-1"],
     "s.yaml: base: --set 'engine.num_mtp=-1': engine.num_mtp"),
    ("base: base.yaml\naxes: {device: [a]}\n", ["--front-by", "engine.nope"],
     "--front-by engine.nope: not a workload key"),
    ("base: base.yaml\naxes: {device: [a]}\n", ["--workers", "0"], "--workers: expected"),
])
def test_bad_input_exits_2_naming_it_before_anything_runs(tmp_path, capsys, text, args, said):
    path = sweep_file(tmp_path, text)
    assert main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}", *args,
                 "--json"]) == 2
    out, err = capsys.readouterr()
    assert said in err and json.loads(out)["exit_code"] == 2
    assert not (tmp_path / "out").exists()


def test_set_output_moves_the_sweep_and_random_draws_its_points(tmp_path):
    path = sweep_file(tmp_path, GRID + "search: {method: random, n: 2, seed: 3}\n")
    drawn = plan(path, (f"output={tmp_path / 'elsewhere'}",))
    assert drawn.folder == tmp_path / "elsewhere" / "s" and len(drawn.points) == 2
    assert drawn.points == plan(path, (f"output={tmp_path / 'elsewhere'}",)).points
    assert all(str(p.folder).startswith(str(drawn.folder)) for p in drawn.unique)


def test_a_point_done_where_the_driver_cannot_see_its_marker_fails_naming_the_shared_path(
        grid_plan):
    elsewhere = lambda point: dict(empty_answer(), status="done", reason="")  # noqa: E731
    rows = execute(grid_plan, InProcess(), task=elsewhere)
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == len(grid_plan.unique)
    assert all("point.json is not visible here" in r["reason"] and "shared filesystem"
               in r["reason"] for r in failed)


ALL_REFUSED = "base: base.yaml\naxes: {engine.num_kv_blocks: [0]}\n"
ONE_POINT = "base: base.yaml\naxes: {device: [modeled:B200]}\n"


def test_ray_is_imported_only_for_ray_and_without_it_ray_exits_2_saying_how_to_install(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray: ImportError, as uninstalled
    out = tmp_path / "out"
    assert main(["sweep", str(sweep_file(tmp_path, ALL_REFUSED)), "--set", f"output={out}",
                 "--json"]) == 2  # nothing to run, said before Ray could be imported
    assert "nothing to run" in capsys.readouterr().err
    path = sweep_file(tmp_path, ONE_POINT)  # Ray is needed before the point runs
    assert main(["sweep", str(path), "--set", f"output={tmp_path / 'ray'}", "--ray",
                 "127.0.0.1:6379", "--json"]) == 2
    err = capsys.readouterr().err
    assert "--ray 127.0.0.1:6379: Ray is not installed" in err
    assert 'pip install -e ".[ray]"' in err and 'pip install "steptrace[ray]"' in err
    assert not (tmp_path / "ray").exists()


def test_ray_at_an_address_where_nothing_listens_exits_2_at_once(tmp_path, capsys):
    pytest.importorskip("ray", reason="Ray is not installed: the ray extra")
    import socket

    with socket.socket() as s:  # bound, not listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
        assert main(["sweep", str(sweep_file(tmp_path, ONE_POINT)), "--set",
                     f"output={tmp_path / 'out'}", "--ray", address]) == 2
    assert f"--ray {address}: nothing answers at {address}" in capsys.readouterr().err


OPTUNA = GRID.replace("where:", "search: {method: optuna, n: 3, seed: 1, objective: "
                      "output_tokens_per_device}\nwhere:")


def test_optuna_draws_n_points_stores_its_study_and_resumes_without_running_one_again(
        tmp_path):
    pytest.importorskip("optuna", reason="Optuna is not installed: the optuna extra")
    from harness.sweeps.points.optuna_search import STUDY, SearchError, search

    path = sweep_file(tmp_path, OPTUNA)
    the_plan = plan(path, (f"output={tmp_path / 'out'}",))
    first = InProcess()
    rows = search(the_plan, first, task.run_point, batch=2)
    assert (the_plan.folder / STUDY).is_file() and 1 <= len(rows) <= 3
    assert all(r["status"] in ("done", "refused") for r in rows)
    assert len(first.ran) == len(set(first.ran)) == sum(r["status"] == "done" for r in rows)
    again = InProcess()
    resumed = [dict(r, skipped=r["status"] == "done") for r in rows]
    assert _same(search(the_plan, again, task.run_point), resumed)
    assert again.ran == []  # the study's points complete: none ran again
    more = plan(sweep_file(tmp_path, OPTUNA.replace("n: 3", "n: 5")),
                (f"output={tmp_path / 'out'}",))
    grown = search(more, InProcess(), task.run_point)
    assert _same(grown[:len(rows)], resumed) and len(grown) > len(rows)
    other = plan(sweep_file(tmp_path, OPTUNA.replace("[64, 256]", "[256, 64]")),
                 (f"output={tmp_path / 'out'}",))
    with pytest.raises(SearchError, match="stored for other axes.*--fresh"):
        search(other, InProcess(), task.run_point)
    assert search(other, InProcess(), task.run_point, fresh=True)


def _same(rows, others) -> bool:
    """Equal rows, NaN equal to NaN (an answer without an SLO has no attainment)."""
    return json.dumps(rows, sort_keys=True) == json.dumps(others, sort_keys=True)


def test_optuna_without_optuna_exits_2_saying_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    path = sweep_file(tmp_path, OPTUNA)
    assert main(["sweep", str(path), "--set", f"output={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "search.method optuna: Optuna is not installed" in err
    assert 'pip install -e ".[optuna]"' in err and not (tmp_path / "out").exists()
