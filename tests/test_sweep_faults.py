"""`steptrace sweep` under faults, as a user meets them (docs/sweeps.md, "The sweep's
folder"): its process SIGKILLed (its workers die with it, the running point left
incomplete), a second sweep started into the same output (refused, the first's points
untouched), a signal with --json (one JSON document), and a table past a file-size limit
(exit 1, the points kept). Slow tier: each test starts processes."""

import fcntl
import json
import os
import resource
import signal
import subprocess
import time

import psutil
import pytest

from harness.sweeps.points.marker import MARKER
from tests.helpers import process_gone
from tests.test_sweep_cli import GRID, steptrace
from tests.test_sweep_points import TINY, sweep_file

pytestmark = pytest.mark.slow

LONG = TINY.replace("requests: 12", "requests: 30000")  # seconds a point


def _running_point(points, proc, within_s=120):
    """A point folder whose run has begun and whose point.json is not written yet."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and proc.poll() is None:
        for folder in (points.iterdir() if points.is_dir() else ()):
            if list(folder.glob("*/*/manifest.json")) and not (folder / MARKER).exists():
                return folder
        time.sleep(0.02)
    pytest.fail(f"no point running within {within_s} s (exit status {proc.poll()})")


def _start(tmp_path, *args, grid=GRID, workers=1, **kwargs):
    path = sweep_file(tmp_path, grid, LONG)
    argv = steptrace("sweep", str(path), "--set", f"output={tmp_path / 'out'}", "--workers",
                     str(workers), *args)
    return argv, subprocess.Popen(argv, start_new_session=True, text=True, **kwargs)


def _end(proc, *pids):
    """Every process the test started gone, however it went."""
    for pid in (proc.pid, *pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def test_a_sigkilled_sweeps_workers_die_with_it_and_its_point_stays_incomplete(tmp_path):
    _, proc = _start(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = []
    try:
        running = _running_point(tmp_path / "out" / "s" / "points", proc)
        children = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert children  # the pool's worker, its run's table writer, the resource tracker
        os.kill(proc.pid, signal.SIGKILL)  # the sweep's process alone, as the OOM killer does
        proc.wait(timeout=30)
        left = [pid for pid in children if not process_gone(pid, within_s=5)]
        assert left == [], [psutil.Process(pid).cmdline() for pid in left]
        time.sleep(1)  # a worker left running would finish the point about now
        assert not (running / MARKER).exists()
    finally:
        _end(proc, *children)


def test_a_second_sweep_into_the_same_output_is_refused_and_removes_nothing(tmp_path):
    argv, first = _start(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        running = _running_point(tmp_path / "out" / "s" / "points", first)
        runs = sorted(running.glob("*/*"))
        second = subprocess.run(argv + ["--json"], capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2, second.stderr
        assert second.stderr.count("\n") == 1
        assert f"{tmp_path / 'out' / 's'} is in use by another sweep (pid {first.pid} on " \
            in second.stderr
        assert json.loads(second.stdout)["exit_code"] == 2
        assert first.poll() is None and sorted(running.glob("*/*")) == runs  # untouched
    finally:
        _end(first)


def _alive(pids):
    """Those of `pids` still running (a zombie has ended: its parent reaps it)."""
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def _free(lock):
    """Whether no process holds the sweep's lock: taken, and at once let go, if so."""
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # the lock, where taken, with it
    return True


def test_a_stopped_sweep_holds_its_folder_until_its_last_worker_is_gone(tmp_path):
    """A worker stopped by the signal writes its point's interrupted run for a while: a
    second sweep let in meanwhile would remove that point's folder as it is written."""
    _, proc = _start(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = []
    try:
        _running_point(tmp_path / "out" / "s" / "points", proc)
        workers = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)
                   if "resource_tracker" not in " ".join(p.cmdline())]  # the sweep's own
        assert workers
        proc.send_signal(signal.SIGINT)
        lock = tmp_path / "out" / "s" / ".sweep.lock"
        deadline = time.monotonic() + 60
        while _alive(workers) and time.monotonic() < deadline:
            if _free(lock):
                left = _alive(workers)  # a worker gone just before the lock was taken: fine
                assert not left, f"the lock is free while {left} run"
            time.sleep(0.005)
        assert not _alive(workers)
        assert proc.wait(timeout=30) == 130
    finally:
        _end(proc, *workers)


@pytest.mark.parametrize("signum, code, name", [(signal.SIGTERM, 143, "SIGTERM"),
                                                (signal.SIGINT, 130, "SIGINT (Ctrl-C)")])
def test_json_after_a_signal_is_one_json_document(tmp_path, signum, code, name):
    _, proc = _start(tmp_path, "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _running_point(tmp_path / "out" / "s" / "points", proc)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        _end(proc)
    assert proc.returncode == code, err
    said = json.loads(out)
    assert (said["error"], said["exit_code"]) == ("interrupted", code)
    assert said["message"].startswith(f"interrupted by {name}: the table is not written; the "
                                      f"0 of 6 points complete so far are kept in "
                                      f"{tmp_path / 'out' / 's' / 'points'}")
    assert err.splitlines()[-1] == f"steptrace: {said['message']}"


def _running_points(points, proc, n, within_s=120):
    """`n` point folders whose runs have begun, none of them complete."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and proc.poll() is None:
        running = [f for f in (points.iterdir() if points.is_dir() else ())
                   if list(f.glob("*/*/manifest.json")) and not (f / MARKER).exists()]
        if len(running) >= n:
            return running
        time.sleep(0.02)
    pytest.fail(f"not {n} points running within {within_s} s (exit status {proc.poll()})")


@pytest.mark.parametrize("gap_s", [0.01, 0.3])
def test_a_second_ctrl_c_to_the_process_group_stops_the_sweep_at_once(tmp_path, gap_s):
    """Ctrl-C at a terminal signals the sweep's whole process group, its workers too; a
    second one used to leave the sweep waiting for ever on a worker that the signal had cut
    off in the middle of reading its queue. Now the second kills the workers: exit 130, the
    first signal's line, no process of the sweep left."""
    _, proc = _start(tmp_path, grid="base: base.yaml\naxes: {engine.max_num_seqs: [8, 16]}\n",
                     workers=2, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started = []
    try:
        points = tmp_path / "out" / "s" / "points"
        _running_points(points, proc, 2)
        started = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(gap_s)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert err.splitlines()[-1].startswith(
            f"steptrace: interrupted by SIGINT (Ctrl-C): the table is not written; the 0 of 2 "
            f"points complete so far are kept in {points}"), err
        assert "Traceback" not in err, err
        left = [pid for pid in started if not process_gone(pid, within_s=5)]
        assert left == [], [psutil.Process(pid).cmdline() for pid in left]
        assert not [f for f in points.iterdir() if (f / MARKER).exists()]
    finally:
        _end(proc, *started)


def test_a_table_past_a_file_size_limit_exits_1_and_keeps_the_points(tmp_path):
    """A real write error from the kernel (RLIMIT_FSIZE: EFBIG), no injection: the points
    run first, then a resume under the limit has only the table to write."""
    path = sweep_file(tmp_path, GRID)
    out = tmp_path / "out"
    argv = steptrace("sweep", str(path), "--set", f"output={out}", "--workers", "2")
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    (out / "s" / "sweep.parquet").unlink()

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                           preexec_fn=limit)
    assert again.returncode == 1, again.stderr
    assert again.stderr.splitlines()[-1] == (
        f"steptrace: run failed: cannot write {out / 's' / 'sweep.parquet'}: File too large; "
        f"the points are kept in {out / 's' / 'points'}: run the sweep again to write the "
        f"table")
    assert sorted(p.name for p in (out / "s").iterdir()) == [".sweep.lock", "points"]
    assert len([f for f in (out / "s" / "points").iterdir() if (f / MARKER).is_file()]) == 6
