"""`steptrace sweep` as a user runs it: points in a spawned process pool, --json's rows and
the text table; a sweep killed with SIGKILL mid-way resumes, every point complete exactly
once and no partial folder taken for complete. Slow tier: each test starts processes."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness.sweeps.points.marker import MARKER
from tests.test_sweep_points import TINY, sweep_file

pytestmark = pytest.mark.slow

GRID = """base: base.yaml
axes:
  device: [modeled:B200, modeled:H200]
  engine.max_num_batched_tokens: [64, 128, 256]
"""


def steptrace(*args):
    return [sys.executable, "-m", "harness.commands", *args]


def test_the_command_runs_points_in_processes_and_prints_rows(tmp_path):
    path = sweep_file(tmp_path, GRID + "  engine.num_kv_blocks: [256, 0]\n")
    out = tmp_path / "out"
    done = subprocess.run(steptrace("sweep", str(path), "--set", f"output={out}", "--workers",
                                    "2", "--json"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["points"], result["done"], result["refused"], result["failed"]) == \
        (12, 6, 6, 0)
    assert done.stderr.count("steptrace: refused: ") == 6
    assert "sweep: 6 of 6 points: 6 done" in done.stderr
    assert {r["front"] for r in result["rows"] if r["pareto"]} == {"modeled:B200",
                                                                   "modeled:H200"}
    text = subprocess.run(steptrace("sweep", str(path), "--set", f"output={out}"),
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[-1] == \
        "12 points: 6 with an answer, 6 refused; 6 skipped (complete before)"
    assert f"table: {out / 's' / 'sweep.parquet'}" in text.stdout


def _wait_for_a_partial_point(points, proc, within_s=120):
    """The point folders once one is complete and another started (no marker yet)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and proc.poll() is None:
        folders = list(points.glob("*")) if points.is_dir() else []
        complete = [f for f in folders if (f / MARKER).exists()]
        if complete and len(complete) < len(folders):
            return
        time.sleep(0.01)
    pytest.fail(f"no partial point within {within_s} s (exit status {proc.poll()})")


def _session(sid, within_s=30):
    """The command lines of the session's processes still running after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(" ".join(p.cmdline()))
            except (psutil.Error, ProcessLookupError, PermissionError):
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_a_sweep_killed_mid_way_resumes_each_point_complete_once(tmp_path):
    base = TINY.replace("requests: 12", "requests: 3000")  # about 0.5 s a point
    path = sweep_file(tmp_path, GRID, base)
    out, points = tmp_path / "out", tmp_path / "out" / "s" / "points"
    argv = steptrace("sweep", str(path), "--set", f"output={out}", "--workers", "1", "--json")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        _wait_for_a_partial_point(points, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert _session(proc.pid) == []  # the pool's workers too
    before = {f.name: (f / MARKER).stat().st_mtime_ns for f in points.iterdir()
              if (f / MARKER).exists()}
    partial = [f.name for f in points.iterdir() if f.name not in before]
    assert before and partial
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert (result["done"], result["skipped"]) == (6, len(before))
    assert {f.name: (f / MARKER).stat().st_mtime_ns for f in points.iterdir()
            if f.name in before} == before  # none of them ran again
    for row in result["rows"]:
        folder = out / "s" / row["folder"]
        assert json.loads((folder / MARKER).read_text())["run_dir"] == row["run_dir"]
        assert len(list((folder / "base").iterdir())) == 1  # the partial run removed


def test_sigterm_stops_the_sweeps_points_and_leaves_none_taken_for_complete(tmp_path):
    base = TINY.replace("requests: 12", "requests: 30000")  # seconds a point
    path = sweep_file(tmp_path, GRID, base)
    out, points = tmp_path / "out", tmp_path / "out" / "s" / "points"
    proc = subprocess.Popen(steptrace("sweep", str(path), "--set", f"output={out}",
                                      "--workers", "2"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for_a_partial_point(points, proc)
        proc.send_signal(signal.SIGTERM)  # the sweep's process alone, as a job scheduler does
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err
    assert _session(proc.pid) == []  # the workers stopped with it
    started = list(points.iterdir())
    assert len(started) < 6  # queued points did not start
    for folder in started:  # a point stopped before its run began has no run folder
        runs = list((folder / "base").glob("*/manifest.json"))
        complete = [json.loads(m.read_text())["complete"] for m in runs]
        # a marker only over a complete run; a run that completed as the signal came may
        # lack its marker: a rerun runs that point again
        assert complete == [True] or not (folder / MARKER).exists()


def blocked_once_it_starts(argv, folder, blocked):
    """The sweep `argv` run, a file put in the place of the point folder `blocked` once
    the sweep holds `folder` (its checks done, which refuse such a file, no point begun):
    that point's run cannot start."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (folder / ".sweep.lock").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
            time.sleep(0.005)
        blocked.parent.mkdir(parents=True, exist_ok=True)
        blocked.write_text("not a point's folder")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_a_failed_point_exits_1_after_the_others_ran(tmp_path):
    from harness.sweeps.points.execute import plan

    path = sweep_file(tmp_path, GRID)
    out = tmp_path / "out"
    blocked = plan(path, (f"output={out}",)).unique[2]
    argv = steptrace("sweep", str(path), "--set", f"output={out}", "--json")
    done = blocked_once_it_starts(argv, out / "s", blocked.folder)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    (failed,) = [r for r in result["rows"] if r["status"] == "failed"]
    assert failed["point"] == blocked.key and failed["reason"] == (
        f"NotAFolder: {blocked.folder} exists and is not a directory")
    assert (result["done"], result["failed"]) == (5, 1)
    assert (out / "s" / "sweep.parquet").is_file()
    blocked.folder.unlink()
    again = json.loads(subprocess.run(argv, capture_output=True, text=True, timeout=300).stdout)
    assert (again["done"], again["skipped"], again["failed"]) == (6, 5, 0)


def test_an_optuna_search_runs_in_processes_and_resumes_from_its_study(tmp_path):
    pytest.importorskip("optuna", reason="Optuna is not installed: the optuna extra")
    path = sweep_file(tmp_path, GRID + "search: {method: optuna, n: 4, objective: "
                                       "output_tokens_per_device}\n")
    argv = steptrace("sweep", str(path), "--set", f"output={tmp_path}", "--workers", "2",
                     "--json")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert 1 <= result["points"] <= 4 and result["done"] == result["points"]
    assert "sweep: 4 of 4 points" in done.stderr and (tmp_path / "s" / "study.db").is_file()
    again = json.loads(subprocess.run(argv, capture_output=True, text=True,
                                      timeout=300).stdout)
    assert again["skipped"] == again["points"] == result["points"]
    assert [r["point"] for r in again["rows"]] == [r["point"] for r in result["rows"]]
