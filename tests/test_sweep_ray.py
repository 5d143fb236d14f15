"""`steptrace sweep --ray`: the points as tasks of a real Ray cluster, a local head started
for this module (two CPUs, on 127.0.0.1) and stopped after it, its processes gone. The
table equals the host pool's point for point; a second run resumes; a failed point fails
alone; SIGTERM cancels the queued tasks. Slow tier: it starts a Ray cluster and the
commands."""

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pandas.testing import assert_frame_equal

from harness.sweeps.points.marker import MARKER
from tests.test_sweep_cli import (
    GRID,
    _session,
    _wait_for_a_partial_point,
    blocked_once_it_starts,
    steptrace,
)
from tests.test_sweep_points import TINY, sweep_file

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason='Ray is not installed (the ray extra: pip install -e ".[ray]")')]

READY = "This command will now block"  # `ray start --block`, once the head is up
HOST_TIMED = ("run_dir",)  # the columns that name a run's folder (its date-time)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(head: subprocess.Popen) -> None:
    """The head's processes stopped, by its session: SIGTERM to `ray start --block` stops
    what it started; any left are killed. Never `ray stop`, which stops every Ray process
    of the user on this host."""
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    if _session(head.pid, within_s=20):
        os.killpg(head.pid, signal.SIGKILL)
    if head.poll() is None:
        head.wait(timeout=30)


@pytest.fixture(scope="module")
def head():
    """The address of a Ray head of 2 CPUs, for the module's tests."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    port = _free_port()
    log = Path(temp) / "head.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "ray"), "start", "--head", "--num-cpus", "2",
             "--node-ip-address", "127.0.0.1", "--port", str(port),
             "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", temp,
             "--block"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while READY not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Ray head did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)
        assert _session(proc.pid) == []
        shutil.rmtree(temp, ignore_errors=True)


def _sweep(path, out, *args):
    return subprocess.run(steptrace("sweep", str(path), "--set", f"output={out}", "--json",
                                    *args), capture_output=True, text=True, timeout=300)


def test_ray_runs_the_points_and_its_table_equals_the_host_pools(tmp_path, head):
    path = sweep_file(tmp_path, GRID + "  engine.num_kv_blocks: [256, 0]\n")
    tables = {}
    for executor, args in (("ray", ("--ray", head)), ("pool", ("--workers", "2"))):
        done = _sweep(path, tmp_path / executor, *args)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert (result["points"], result["done"], result["refused"]) == (12, 6, 6)
        assert "sweep: 6 of 6 points: 6 done, 0 skipped (complete), 0 failed" in done.stderr
        tables[executor] = pq.read_table(tmp_path / executor / "s" / "sweep.parquet")
    ray_rows, pool_rows = (tables[e].drop_columns(HOST_TIMED).to_pandas() for e in tables)
    assert_frame_equal(ray_rows, pool_rows, check_exact=True)  # the modeled answers exactly
    again = _sweep(path, tmp_path / "ray", "--ray", head)
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["skipped"]) == 6


def test_the_sweep_files_ray_address_runs_there_and_a_refused_point_stays_refused(
        tmp_path, head):
    path = sweep_file(tmp_path, f"ray: {{address: '{head}'}}\n" + GRID)
    done = _sweep(path, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["done"] == 6


def test_an_optuna_search_through_ray_draws_and_answers_as_the_host_pools(tmp_path, head):
    pytest.importorskip("optuna", reason="Optuna is not installed: the optuna extra")
    path = sweep_file(tmp_path, GRID + "search: {method: optuna, n: 5, seed: 2, objective: "
                                       "tokens_per_s_per_user}\n")
    found = {}
    for executor, args in (("ray", ("--ray", head)), ("pool", ())):
        done = _sweep(path, tmp_path / executor, "--workers", "2", *args)
        assert done.returncode == 0, done.stderr
        found[executor] = pq.read_table(tmp_path / executor / "s" / "sweep.parquet")
    ray_rows, pool_rows = (found[e].drop_columns(HOST_TIMED).to_pandas() for e in found)
    assert_frame_equal(ray_rows, pool_rows, check_exact=True)


def test_a_failed_point_through_ray_exits_1_after_the_others_ran(tmp_path, head):
    from harness.sweeps.points.execute import plan

    path = sweep_file(tmp_path, GRID)
    out = tmp_path / "out"
    blocked = plan(path, (f"output={out}",)).unique[2]
    done = blocked_once_it_starts(steptrace("sweep", str(path), "--set", f"output={out}",
                                            "--json", "--ray", head), out / "s", blocked.folder)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    (failed,) = [r for r in result["rows"] if r["status"] == "failed"]
    assert failed["point"] == blocked.key and failed["reason"].startswith("NotAFolder: ")
    assert (result["done"], result["failed"]) == (5, 1)
    blocked.folder.unlink()
    again = json.loads(_sweep(path, out, "--ray", head).stdout)
    assert (again["done"], again["skipped"], again["failed"]) == (6, 5, 0)


def test_sigterm_cancels_the_queued_tasks_and_writes_no_table(tmp_path, head):
    base = TINY.replace("requests: 12", "requests: 30000")  # seconds a point
    path = sweep_file(tmp_path, GRID, base)
    out, points = tmp_path / "out", tmp_path / "out" / "s" / "points"
    proc = subprocess.Popen(steptrace("sweep", str(path), "--set", f"output={out}",
                                      "--ray", head),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for_a_partial_point(points, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err
    assert not (out / "s" / "sweep.parquet").exists()
    started = sorted(f.name for f in points.iterdir())
    complete = sorted(f.name for f in points.iterdir() if (f / MARKER).exists())
    assert len(started) < 6
    time.sleep(3)  # a task left running would go on writing points
    assert sorted(f.name for f in points.iterdir()) == started
    assert sorted(f.name for f in points.iterdir() if (f / MARKER).exists()) == complete


def test_a_frontier_search_through_ray_equals_the_host_pools_point_for_point(tmp_path, head):
    from tests.test_frontier_search import sweep_file as frontier_file

    path = frontier_file(tmp_path, {"mtp": [0], "most": 8, "keep": 2, "levels": [20, 40],
                                    "disaggregated": False})
    tables = {}
    for executor, args in (("ray", ("--ray", head)), ("pool", ("--workers", "2"))):
        done = _sweep(path, tmp_path / executor, *args)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["frontier"]["readings"]
        tables[executor] = {name: pq.read_table(tmp_path / executor / "fr" / f"{name}.parquet")
                            .to_pandas() for name in ("frontier_points", "frontier_readings")}
    for name in ("frontier_points", "frontier_readings"):
        assert_frame_equal(tables["ray"][name], tables["pool"][name], check_exact=True)
