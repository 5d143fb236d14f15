"""Faults the harness survives (docs/reliability.md): a conversion onto its own input or
onto a device, a FIFO or a socket, a full disk under every output written outside the
recorder, SIGINT and SIGTERM in a run and a sweep (exit 130 / 143, the sweep stopped), and a
harness killed outright (no telemetry folder left behind)."""

import errno
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from fileio import atomic
from fileio.atomic import NotAnOutputFile, WriteFailed, atomic_open
from harness.commands import main
from harness.io.interrupt import Stop
from harness.record import run_folder
from harness.record.table_reader import read_requests
from harness.replay import driver as replay_module
from harness.telemetry import Sampler
from harness.traces.read import read_trace
from harness.workload import load_workload
from tests.helpers import ENOSPC, MODELED, FullDisk, process_gone, wait_for_samples

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "workloads" / "traces" / "synthetic_small.csv"
# 400 requests over 20 s of the real clock: long enough to be interrupted mid-replay.
SLOW = """trace:
  generate: {requests: 400, rate: 20, prompt: {uniform: [4, 40]}, output: {uniform: [1, 8]}}
engine: {max_num_batched_tokens: 256, num_kv_blocks: 256}
model: tiny
device: cpu
calibration_requests: 0
"""


def listing(folder):
    return sorted(p.name for p in Path(folder).iterdir())


# --- a full disk, simulated -------------------------------------------------------------

@pytest.fixture
def full_disk(monkeypatch):
    """full_disk(room=0, when=...): files fileio.atomic opens whose final name passes `when`
    get `room` bytes before ENOSPC."""
    def install(room=0, when=lambda final_name: True):
        def fake_open(path, mode, **kwargs):
            file = open(path, mode, **kwargs)
            final = Path(path).name[1:].rsplit(".", 2)[0]  # .NAME.<token>.tmp -> NAME
            return FullDisk(file, room) if when(final) else file
        monkeypatch.setattr(atomic, "open", fake_open, raising=False)
    return install


# --- 1. a conversion never overwrites its own input -----------------------------------

@pytest.mark.parametrize("alias", ["same path", "./ path", "symlink", "hard link"])
def test_convert_refuses_to_overwrite_its_input(tmp_path, monkeypatch, capsys, alias):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "a.csv"
    src.write_bytes(TRACE.read_bytes())
    dst = {"same path": "a.csv", "./ path": "./a.csv", "symlink": "link.csv",
           "hard link": "hard.csv"}[alias]
    if alias == "symlink":
        os.symlink(src, dst)
    elif alias == "hard link":
        os.link(src, dst)
    assert main(["trace", "convert", "a.csv", dst]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"steptrace: error: {Path(dst)}: the output is the input file (a.csv)")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert src.read_bytes() == TRACE.read_bytes()  # untouched


def test_convert_refuses_a_directory_as_output(tmp_path, capsys):
    assert main(["trace", "convert", str(TRACE), str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory" in capsys.readouterr().err


# Made in tmp_path only: as root, the conversion these tests guard against replaced the
# host's /dev/null and /dev/full with plain files.
NODES = ("fifo", "device", "socket", "symlink to a device", "symlink to a fifo")
WHAT = {"fifo": "a FIFO (named pipe)", "device": "a character device", "socket": "a socket"}


def make_node(path: Path, kind: str) -> Path:
    """A FIFO, a character device (mknod: root only, else the test is skipped) or a socket
    at `path`; for "symlink to a KIND", that node beside it and `path` a link to it. Returns
    the node."""
    if kind.startswith("symlink to a "):
        node = make_node(path.with_name("node"), kind.split()[-1])
        path.symlink_to(node)
        return node
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # the null device's numbers
        except OSError as e:
            pytest.skip(f"mknod: {e.strerror}")
    else:  # a socket's path holds at most 107 bytes: bound by its name, from its folder
        cwd = os.getcwd()
        os.chdir(path.parent)
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(path.name)
        finally:
            os.chdir(cwd)
    return path


def identity(path: Path) -> tuple:
    """What a rename over the node would change: its kind, inode and device numbers."""
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_ino, st.st_rdev


def refusal(path: Path, node: Path, kind: str) -> str:
    link = f"a symbolic link to {os.path.realpath(node)}, " if path != node else ""
    return f"{path}: is {link}{WHAT[kind.split()[-1]]}, not a regular file"


@pytest.mark.parametrize("kind", NODES)
def test_convert_refuses_an_output_that_is_not_a_regular_file(tmp_path, capsys, kind):
    """The rename into place would put a plain file where the node was: refused, exit 2,
    nothing written (nor read), the node as it was."""
    dst = tmp_path / "out.csv"
    node = make_node(dst, kind)
    before = identity(node), listing(tmp_path)
    assert main(["trace", "convert", str(TRACE), str(dst)]) == 2
    assert capsys.readouterr().err == (f"steptrace: error: {refusal(dst, node, kind)}; give "
                                       f"the output file's path\n")
    assert (identity(node), listing(tmp_path)) == before


def test_convert_writes_through_a_symlink_to_a_regular_file(tmp_path):
    target, link = tmp_path / "target.csv", tmp_path / "link.csv"
    target.write_text("the previous output\n")
    link.symlink_to(target)
    assert main(["trace", "convert", str(TRACE), str(link)]) == 0
    assert link.is_symlink() and len(read_trace(target).df) == 400
    assert listing(tmp_path) == ["link.csv", "target.csv"]


# --- 2. outputs are written whole or not at all ----------------------------------------

@pytest.mark.parametrize("at", ["write", "fsync"])
def test_a_full_disk_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch,
                                                                full_disk, at):
    path = tmp_path / "out.txt"
    path.write_text("the previous version\n")
    if at == "write":
        full_disk(room=5)
    else:  # where a network or delayed-allocation file system reports it
        def no_space(fd):
            raise OSError(errno.ENOSPC, ENOSPC)
        monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(WriteFailed) as caught:
        with atomic_open(path) as f:
            f.write("a new version, longer than five bytes\n" * 1000)
    assert str(caught.value) == f"cannot write {path}: {ENOSPC}"
    assert caught.value.errno == errno.ENOSPC
    assert listing(tmp_path) == ["out.txt"] and path.read_text() == "the previous version\n"


def test_an_exception_in_the_writer_leaves_no_file(tmp_path):
    with pytest.raises(KeyError):
        with atomic_open(tmp_path / "out.txt") as f:
            f.write("half")
            raise KeyError("the writer's own bug")
    assert listing(tmp_path) == []


def test_a_symlinked_output_is_written_through(tmp_path):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    with atomic_open(link) as f:
        f.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert listing(tmp_path) == ["link.txt", "target.txt"]


@pytest.mark.parametrize("kind", NODES)
def test_an_output_that_is_not_a_regular_file_is_refused_before_writing(tmp_path, kind):
    path = tmp_path / "out.txt"
    node = make_node(path, kind)
    before = identity(node), listing(tmp_path)
    with pytest.raises(NotAnOutputFile) as caught:
        with atomic_open(path) as f:
            f.write("never written\n")
    assert str(caught.value) == f"cannot write {refusal(path, node, kind)}"
    assert isinstance(caught.value, WriteFailed)  # a caller's exit 1, where it has no check
    assert (identity(node), listing(tmp_path)) == before


def test_a_node_made_while_the_file_is_written_is_not_replaced(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(NotAnOutputFile, match="is a FIFO"):
        with atomic_open(path) as f:
            f.write("the new version\n")
            os.mkfifo(path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode) and listing(tmp_path) == ["out.txt"]


def test_a_manifest_that_is_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "manifest.json")
    with pytest.raises(NotAnOutputFile, match="manifest.json: is a FIFO"):
        run_folder.write_manifest({"complete": True}, tmp_path)
    assert stat.S_ISFIFO(os.lstat(tmp_path / "manifest.json").st_mode)
    assert listing(tmp_path) == ["manifest.json"]


@pytest.mark.parametrize("name", ["out.csv", "out.parquet", "out.jsonl"])
@pytest.mark.parametrize("existing", [False, True])
def test_convert_on_a_full_disk_exits_1_and_leaves_no_file(tmp_path, capsys, full_disk,
                                                           name, existing):
    dst = tmp_path / name
    if existing:
        dst.write_text("the previous output\n")
    full_disk(room=100)
    assert main(["trace", "convert", str(TRACE), str(dst)]) == 1
    err = capsys.readouterr().err
    assert err == f"steptrace: run failed: cannot write {dst}: {ENOSPC}\n"
    assert listing(tmp_path) == ([name] if existing else [])
    if existing:
        assert dst.read_text() == "the previous output\n"


def test_convert_past_a_file_size_limit_exits_1(tmp_path):
    """A real write error from the kernel (RLIMIT_FSIZE: EFBIG, `ulimit -f`), no injection."""
    dst = tmp_path / "out.csv"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
    proc = subprocess.run([sys.executable, "-m", "harness.commands", "trace", "convert",
                           str(TRACE), str(dst)], cwd=ROOT, capture_output=True, text=True,
                          preexec_fn=limit, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"steptrace: run failed: cannot write {dst}: File too large\n"
    assert listing(tmp_path) == []


def test_convert_still_writes_every_format(tmp_path):
    for name in ("out.csv", "out.parquet", "out.jsonl"):
        assert main(["trace", "convert", str(TRACE), str(tmp_path / name)]) == 0
        assert len(read_trace(tmp_path / name).df) == 400
    assert listing(tmp_path) == ["out.csv", "out.jsonl", "out.parquet"]


def test_a_manifest_that_cannot_be_written_leaves_the_previous_one(tmp_path, full_disk):
    run_folder.write_manifest({"complete": False}, tmp_path)
    full_disk(room=3)
    with pytest.raises(WriteFailed, match=f"manifest.json: {ENOSPC}"):
        run_folder.write_manifest({"complete": True, "ended": "now"}, tmp_path)
    assert listing(tmp_path) == ["manifest.json"]
    assert json.loads((tmp_path / "manifest.json").read_text()) == {"complete": False}


def test_a_run_whose_last_manifest_cannot_be_written_exits_1(tmp_path, capsys, full_disk):
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{MODELED}")
    writes = []

    def second_manifest(final_name):  # the run's first manifest goes through
        writes.append(final_name)
        return final_name == "manifest.json" and writes.count("manifest.json") == 2
    full_disk(room=0, when=second_manifest)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    (run_dir,) = (tmp_path / "results" / "w").iterdir()
    assert err.splitlines()[-1] == (f"steptrace: run failed: cannot write "
                                    f"{run_dir / 'manifest.json'}: {ENOSPC}")
    assert "Traceback" not in err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and "ended" not in manifest  # the first one, whole
    assert not [p for p in listing(run_dir) if p.startswith(".")]


# --- 3. signals: exit 130 / 143, the sweep stopped -------------------------------------

def start_run(tmp_path, body, *args):
    """`steptrace run` in a process of its own, its temporary files under tmp_path/tmp;
    returns once its first run has begun (its manifest exists)."""
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{body}")
    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "harness.commands", "run", str(path), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, TMPDIR=str(tmp_path / "tmp")))
    deadline = time.monotonic() + 120
    while not list((tmp_path / "results").glob("w/*/manifest.json")):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("the run did not start: " + "".join(proc.communicate()))
        time.sleep(0.1)
    time.sleep(1.0)  # into the replay
    return proc


def assert_interrupted_run(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["interrupted"] is True
    requests = read_requests(run_dir / "requests.parquet")
    assert len(requests) == 400 and (requests["status"] == "unfinished").any()
    assert len(pd.read_parquet(run_dir / "steps.parquet"))
    for name in ("batches", "summary", "device"):
        pd.read_parquet(run_dir / f"{name}.parquet")
    assert not [p for p in listing(run_dir) if p.startswith(".")]


@pytest.mark.slow
def test_sigint_stops_the_whole_sweep_and_exits_130(tmp_path):
    proc = start_run(tmp_path, SLOW + "gil: both\nrepeats: 2\n", "--json")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    (run_dir,) = (tmp_path / "results" / "w").iterdir()  # the three later runs never began
    assert_interrupted_run(run_dir)
    result = json.loads(out)
    assert (result["interrupted"], result["signal"], result["planned"]) == (True, "SIGINT", 4)
    assert [(r["run_dir"], r["complete"]) for r in result["runs"]] == [(str(run_dir), False)]
    assert err.splitlines()[-1] == (f"steptrace: interrupted by SIGINT: 1 of 4 runs written: "
                                    f"{run_dir} (incomplete); 3 not started")
    assert "Traceback" not in err
    assert listing(tmp_path / "tmp") == []  # the telemetry folder too


@pytest.mark.slow
def test_sigterm_exits_143_after_writing_the_tables(tmp_path):
    proc = start_run(tmp_path, SLOW)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    (run_dir,) = (tmp_path / "results" / "w").iterdir()
    assert_interrupted_run(run_dir)
    assert "[INTERRUPTED]" in out
    assert err.splitlines()[-1].startswith("steptrace: interrupted by SIGTERM: 1 of 1 runs")
    assert listing(tmp_path / "tmp") == []


@pytest.mark.slow
def test_a_second_signal_changes_nothing(tmp_path):
    """Signals while the first one's tables are being written: the same whole tables, the
    first signal's exit status, no traceback."""
    proc = start_run(tmp_path, SLOW)
    proc.send_signal(signal.SIGINT)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
        time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    (run_dir,) = (tmp_path / "results" / "w").iterdir()
    assert_interrupted_run(run_dir)
    assert err.splitlines()[-1].startswith("steptrace: interrupted by SIGINT: 1 of 1 runs")
    assert "Traceback" not in err
    assert listing(tmp_path / "tmp") == []


def test_a_stopped_sweep_starts_no_run(tmp_path):
    from harness.sweeps.sweep import run_workload

    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{MODELED}gil: both\n")
    stop = Stop()
    stop.request(signal.SIGTERM)
    assert run_workload(load_workload(path), stop=stop) == []
    assert not (tmp_path / "results").exists()
    assert (stop.signal_name, stop.exit_code) == ("SIGTERM", 143)


def test_a_signal_during_calibration_makes_no_run_directory(tmp_path, monkeypatch):
    import harness.run.end_to_end
    from harness.sweeps.sweep import run_workload

    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n"
                    + MODELED.replace("calibration_requests: 0", "calibration_requests: 4")
                    + "gil: both\n")
    calibrate = harness.run.end_to_end.calibrate

    def ctrl_c_while_calibrating(*args):
        os.kill(os.getpid(), signal.SIGINT)  # handled: the sweep's handler sets the flag
        return calibrate(*args)
    monkeypatch.setattr(harness.run.end_to_end, "calibrate", ctrl_c_while_calibrating)
    stop = Stop()
    assert run_workload(load_workload(path), stop=stop) == []
    assert stop.exit_code == 130 and not (tmp_path / "results").exists()


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_report_leaves_no_half_written_folder(tmp_path, signum):
    """SIGTERM used to kill `steptrace report` outright: 33 - 48 MB temporary folders were
    left beside the report's. It now unwinds as Ctrl-C does."""
    from tests.helpers import modeled_runs

    runs = modeled_runs(tmp_path / "runs", "trace.generate.requests=400")
    out = tmp_path / "report"
    proc = subprocess.Popen([sys.executable, "-m", "harness.commands", "report", *map(str, runs),
                             "-o", str(out), "--trace-events"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".report.*")):  # the report's folder is being built
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("the report did not start building: " + "".join(proc.communicate()))
        time.sleep(0.02)
    proc.send_signal(signum)
    out_text, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    assert err.splitlines()[-1].startswith("steptrace: interrupted by SIG"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no report, no temporary


@pytest.mark.slow
@pytest.mark.parametrize("unbuffered", [False, True])
def test_ctrl_c_after_the_result_never_kills_the_process(tmp_path, unbuffered):
    """SIGINT from the moment `report` printed its result to the process's end (the
    interpreter's teardown, about 0.3 s here): Python restores its own handler as it ends,
    and the process used to die of the signal (status -2) with a traceback. With stdout a
    pipe the result is seen only as the interpreter ends (its buffer flushed then): every
    signal lands after the command's exit status is set, and is ignored; unbuffered, one
    may land before, and stops the command as Ctrl-C does (130, one line)."""
    from tests.helpers import modeled_runs

    (run,) = modeled_runs(tmp_path / "runs")
    out = tmp_path / "report"
    flags = ["-u"] if unbuffered else []
    proc = subprocess.Popen([sys.executable, *flags, "-m", "harness.commands", "report",
                             str(run), "-o", str(out)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stdout.readline()
        sent = 0
        while proc.poll() is None:  # Ctrl-C, again and again, until the process is gone
            proc.send_signal(signal.SIGINT)
            sent += 1
            time.sleep(0.002)
        rest, err = proc.stdout.read(), proc.stderr.read()  # readline() may hold the rest
    finally:
        proc.kill()
    assert first.startswith(str(out / "index.html")), first + err
    assert sent > 0 and "Traceback" not in err
    if proc.returncode == 130:  # the signal came before the command's end
        assert err == "steptrace: interrupted by SIGINT (Ctrl-C)\n"
    else:
        assert (proc.returncode, err) == (0, ""), (proc.returncode, err)
        assert rest.strip() == str(out / "summary.md") and (out / "index.html").is_file()
    assert not unbuffered or proc.returncode in (0, 130)


def test_ctrl_c_from_the_progress_callback_stops_the_sweep(tmp_path, monkeypatch):
    from harness.sweeps.sweep import run_workload

    monkeypatch.setattr(replay_module, "PROGRESS_EVERY", 1)
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{MODELED}gil: both\nrepeats: 2\n")

    def ctrl_c(done, total):
        if done >= 3:
            raise KeyboardInterrupt
    stop = Stop()
    (run,) = run_workload(load_workload(path), ctrl_c, stop)
    run_dir = run.path
    assert stop.exit_code == 130
    assert listing(tmp_path / "results" / "w") == [run_dir.name]
    assert json.loads((run_dir / "manifest.json").read_text())["interrupted"] is True


def test_a_run_that_fails_mid_replay_is_recorded_failed_not_interrupted(tmp_path, monkeypatch,
                                                                        capsys):
    from harness.analysis.compare import Arm, compare
    from harness.analysis.runs import load_runs
    from harness.sweeps.sweep import run_workload

    monkeypatch.setattr(replay_module, "PROGRESS_EVERY", 1)
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{MODELED}")

    def device_falls_over(done, total):
        if done >= 3:
            raise RuntimeError("the device fell over")
    with pytest.raises(RuntimeError, match="fell over"):
        run_workload(load_workload(path), device_falls_over)
    (run_dir,) = (tmp_path / "results" / "w").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["interrupted"] is False
    assert manifest["error"] == "RuntimeError: the device fell over"
    assert main(["show", str(run_dir), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "failed" and shown["error"] == manifest["error"]
    assert shown["notes"][0] == "the run failed: RuntimeError: the device fell over"
    assert main(["show", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "[FAILED]" in out and "note: the run failed: RuntimeError: the device fell" in out
    arm = Arm("A", tuple(load_runs([str(run_dir)])))
    with pytest.raises(Exception, match=r"failed \(RuntimeError: the device fell over\)"):
        compare(arm, arm)


def test_a_recorder_that_cannot_start_leaves_no_run_directory(tmp_path, monkeypatch):
    from harness.replay.loop import NativeLoop, NativePDLoop, PythonLoop, PythonPDLoop
    from harness.sweeps.sweep import run_workload

    def no_writer(*args, **kwargs):
        raise OSError("cannot start the table writer")
    for loop in (PythonLoop, NativeLoop, PythonPDLoop, NativePDLoop):
        monkeypatch.setattr(loop, "recorder_type", no_writer)
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{MODELED}")
    with pytest.raises(OSError, match="table writer"):
        run_workload(load_workload(path))
    assert listing(tmp_path / "results" / "w") == []


@pytest.fixture
def writer_that_cannot_start(monkeypatch):
    """Every new table writer process says it did not start (no idle one is reused)."""
    from harness.record import table_writer

    def command(module):
        return [sys.executable, "-c", "print('not started: OSError: no room for pyarrow')"]
    monkeypatch.setattr(table_writer.child_process, "command", command)
    monkeypatch.setattr(table_writer, "_idle_writer", lambda: None)


@pytest.mark.parametrize("clock", ["virtual", "real"])
def test_a_table_writer_that_cannot_start_fails_the_run_and_leaves_no_folder(
        tmp_path, capsys, writer_that_cannot_start, clock):
    """The virtual clock does not wait for the writer before its first step: its failure to
    start surfaces at the first chunk or at close, and the run folder made goes again. The
    real clock waits for it before the run begins."""
    body = MODELED if clock == "virtual" else \
        SLOW.replace("400", "4") + "telemetry: {enabled: false}\n"
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{body}")
    assert main(["run", str(path), "--json"]) == 1
    failure = json.loads(capsys.readouterr().out)
    assert failure["error"] == "run failed"
    assert failure["message"] == ("NotStarted: the table writer process did not start: not "
                                  "started: OSError: no room for pyarrow")
    assert listing(tmp_path / "results" / "w") == []


def test_a_symlink_planted_at_the_run_folder_is_refused(tmp_path, capsys):
    """results/<name> linked elsewhere would take the run's tables there: refused at
    validation (exit 2, nothing written) and again when the folder is made."""
    from harness.errors import BadInput
    from harness.record.run_folder import new_run_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "w").symlink_to(elsewhere)
    path = tmp_path / "w.yaml"
    path.write_text(f"output: {tmp_path / 'results'}\n{MODELED}")
    for command in ("validate", "run"):
        assert main([command, str(path)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert f"w.yaml:1: output: {tmp_path / 'results' / 'w'} is a symbolic link (to " \
               f"{elsewhere})" in err
    assert listing(elsewhere) == []
    with pytest.raises(BadInput, match="is a symbolic link"):
        new_run_dir(tmp_path / "results" / "w", "released-r0")
    assert listing(elsewhere) == []


# --- 4. no telemetry folder outlives the harness ----------------------------------------

HARNESS = """
import os, sys, time
from harness.telemetry import Sampler
from tests.helpers import wait_for_samples
sampler = Sampler("cpu", [], 0.05, time.perf_counter(), os.getpid())
sampler.start()
wait_for_samples(sampler, 2)
print(sampler._dir, sampler._process.pid, flush=True)
"""


def _vanishes(path, within_s):
    deadline = time.monotonic() + within_s
    while Path(path).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
@pytest.mark.parametrize("end", ["SIGKILL", "exit without stop()"])
def test_a_harness_that_dies_leaves_no_telemetry_folder(tmp_path, end):
    script = HARNESS + ("time.sleep(60)\n" if end == "SIGKILL" else "sys.exit(0)\n")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, TMPDIR=str(tmp_path)))
    try:
        folder, child = proc.stdout.readline().split()
        assert Path(folder).parent == tmp_path and "journal.jsonl" in listing(folder)
        if end == "SIGKILL":
            proc.kill()
        proc.wait(timeout=60)
        assert _vanishes(folder, within_s=10.0)  # a loaded host is slow
        assert process_gone(int(child), within_s=10.0)
        assert listing(tmp_path) == []
    finally:
        proc.kill()
        proc.wait()


def test_stop_removes_the_folder_even_when_it_fails(monkeypatch):
    sampler = Sampler("cpu", [], 0.05, time.perf_counter(), os.getpid())
    sampler.start()
    wait_for_samples(sampler, 1)
    folder, process = sampler._dir, sampler._process

    def broken(self, process):
        raise RuntimeError("halting failed")
    monkeypatch.setattr(Sampler, "_halt", broken)
    try:
        with pytest.raises(RuntimeError, match="halting failed"):
            sampler.stop()
        assert not folder.exists()
    finally:
        process.kill()
        process.wait()


def test_a_stopped_sampler_leaves_no_folder():
    sampler = Sampler("cpu", [], 0.05, time.perf_counter(), os.getpid())
    sampler.start()
    wait_for_samples(sampler, 1)
    folder = sampler._dir
    frame, _ = sampler.stop()
    assert len(frame) and not folder.exists()
