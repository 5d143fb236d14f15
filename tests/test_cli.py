"""steptrace's command line: every command's --json, its exit statuses (0 ok, 1 the run
failed, 2 bad input), one --set syntax, and no torch where none is needed."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.commands import main, show
from harness.commands.replay_scheduler import DEFAULT_TRACE
from tests.helpers import MODELED

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

REPO = Path(__file__).resolve().parents[1]
GENERATED = MODELED.replace("calibration_requests: 0", "calibration_requests: 4")


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def run_json(capsys, argv, status=0):
    assert main(argv + ["--json"]) == status, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_replay_scheduler_on_the_bundled_trace(capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the README's commands run from the repository root
    out = run_json(capsys, ["replay-scheduler", "--set", "overlap=true", "--set", "num_mtp=1"])
    assert out["requests"] == 400 and out["plans_identical"]
    assert out["config"]["overlap"] is True and out["config"]["num_mtp"] == 1
    for impl in ("cpp", "reference"):
        assert (out[impl]["finished"], out[impl]["rejected"]) == (400, 0)
    assert out["cpp"]["steps"] == out["reference"]["steps"]


def test_replay_scheduler_text_still_reads(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["replay-scheduler", "--set", "num_kv_blocks=512"]) == 0
    out = capsys.readouterr().out
    assert "400 requests" in out and "plans identical: yes" in out


def test_replay_reports_rejections(tmp_path, capsys):
    path = write(tmp_path, "arrival_s,prompt_len,output_len\n0,8,4\n0.5,5000,10\n1.0,3,3\n")
    out = run_json(capsys, ["replay-scheduler", str(path), "--set", "num_kv_blocks=64"])
    assert (out["cpp"]["finished"], out["cpp"]["rejected"]) == (2, 1)  # 5000 tokens: rejected


def test_set_reads_yaml_and_null_is_none(tmp_path, capsys):
    path = write(tmp_path, "arrival_s,prompt_len,output_len\n0,8,4\n")
    out = run_json(capsys, ["replay-scheduler", str(path), "--set", "max_prefill_chunk=null",
                            "--set", "lookahead_slots=2", "--set", "engine_type=completion"])
    config = out["config"]
    assert config["max_prefill_chunk"] is None and config["lookahead_slots"] == 2
    assert config["engine_type"] == "completion"


def test_bad_trace_names_file_and_line(tmp_path, capsys):
    path = write(tmp_path, "arrival_s,prompt_len,output_len\n0,1,1\n0.5,x,1\n")
    assert main(["replay-scheduler", str(path), "--json"]) == 2
    assert "trace.csv:3: prompt_len: expected an integer >= 1, got 'x'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--set", "block_size=0"], "block_size must be >= 1, got 0"),
    (["--set", "lookahead_slots=None"], "lookahead_slots must be an integer, got 'None'"),
    (["--set", "nonsense"], "--set 'nonsense': expected KEY.PATH=VALUE"),
    (["--set", "engine.num_mtp=1"], "FIELD=VALUE with FIELD one of max_num_batched_tokens"),
    (["--set", "num_mtp=[1"], "--set 'num_mtp=[1': the value is not valid YAML"),
    (["--step-ms", "0"], "--step-ms must be a finite number > 0, got 0"),
    (["--step-ms", "nan"], "--step-ms must be a finite number > 0, got nan"),
    (["--step-ms", "inf"], "--step-ms must be a finite number > 0, got inf"),
])
def test_bad_replay_input_exits_2(capsys, monkeypatch, argv, words):
    monkeypatch.chdir(REPO)
    assert main(["replay-scheduler"] + argv) == 2
    assert words in capsys.readouterr().err


def test_missing_inputs_exit_2(tmp_path, capsys, monkeypatch):
    assert main(["replay-scheduler", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv: no such file" in capsys.readouterr().err
    assert main(["show", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["trace", "stats", str(tmp_path / "missing.csv")]) == 2
    monkeypatch.chdir(tmp_path)
    assert main(["replay-scheduler"]) == 2
    err = capsys.readouterr().err
    assert f"the bundled {DEFAULT_TRACE} is not under the current directory" in err


def test_validate_run_and_show_speak_json(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    path = write(tmp_path, GENERATED + f"output: {tmp_path / 'out'}\n", "w.yaml")
    out = run_json(capsys, ["validate", str(path), "--set", "engine.num_mtp=1"])
    assert out["valid"] and out["clock"] == "virtual" and out["values"]["engine"]["num_mtp"] == 1
    out = run_json(capsys, ["run", str(path)])
    (run,) = out["runs"]
    assert run["complete"] and run["modeled"] and run["device"] == "H200"  # not the host's
    stats = {(r["metric"], r["stat"]): r["value"] for r in run["summary"]}
    assert stats[("requests", "finished")] == 12
    assert run_json(capsys, ["show", run["run_dir"]]) == run
    assert main(["show", run["run_dir"]]) == 0
    text = capsys.readouterr().out
    assert "device H200 (modeled)" in text and re.search(r"requests finished +12 requests", text)


def test_show_prints_counts_whole(capsys):
    rows = [dict(metric="requests", stat="finished", value=19370.0, unit="requests"),
            dict(metric="ttft", stat="p50", value=12345.678, unit="s")]
    show.print_text(dict(run_dir="r", state="complete", complete=True, device="H200",
                         modeled=True, gil_mode="released", summary=rows))
    text = capsys.readouterr().out
    assert re.search(r"requests finished +19,370 requests", text), text
    assert "1.235e+04 s" in text  # a time keeps 4 significant digits


@pytest.mark.slow
def test_show_into_a_closed_pipe_exits_quietly(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    path = write(tmp_path, GENERATED + f"output: {tmp_path / 'out'}\n", "w.yaml")
    (run,) = run_json(capsys, ["run", str(path)])["runs"]
    # `steptrace show RUN | head -1`, head gone before the output: the pipe's reader is
    # closed before the child (a second of imports) writes a line
    proc = subprocess.Popen([sys.executable, "-m", "harness.commands", "show", run["run_dir"]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_a_failed_run_exits_1(tmp_path, capsys, monkeypatch):
    import harness.sweeps.sweep

    def broken(*args, **kwargs):
        raise RuntimeError("the device fell over")
    monkeypatch.setattr(harness.sweeps.sweep, "run_workload", broken)
    path = write(tmp_path, GENERATED, "w.yaml")
    assert main(["run", str(path)]) == 1
    assert "steptrace: run failed: RuntimeError: the device fell over" in capsys.readouterr().err


def test_bad_workload_exits_2(tmp_path, capsys):
    path = write(tmp_path, GENERATED, "w.yaml")
    for command in ("validate", "run"):
        assert main([command, str(path), "--set", "engine.num_mtp=-1", "--json"]) == 2
        out, err = capsys.readouterr()
        assert "engine.num_mtp: expected an integer >= 0, got -1" in err
        failure = json.loads(out)  # with --json, stdout is JSON whatever happened
        assert (failure["error"], failure["exit_code"]) == ("error", 2)
        assert failure["message"] == err.removeprefix("steptrace: error: ").rstrip("\n")


def test_json_says_every_kind_of_failure_as_json(tmp_path, capsys, monkeypatch):
    """A usage error, a failed run and a bug: each one document on stdout with the exit
    status, beside the same one line on stderr as without --json."""
    import harness.sweeps.sweep

    path = write(tmp_path, GENERATED, "w.yaml")
    assert main(["show", "--json", "--nonsense"]) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "error"

    def broken(*args, **kwargs):
        raise RuntimeError("the device fell over")
    monkeypatch.setattr(harness.sweeps.sweep, "run_workload", broken)
    assert main(["run", str(path), "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == dict(error="run failed", exit_code=1,
                                   message="RuntimeError: the device fell over")
    assert err == "steptrace: run failed: RuntimeError: the device fell over\n"
    import harness.commands.validate
    monkeypatch.setattr(harness.commands.validate, "load", lambda args: {}["x"])
    assert main(["validate", str(path), "--json"]) == 1
    failure = json.loads(capsys.readouterr().out)
    assert failure["error"] == "internal error" and failure["message"].startswith("KeyError")


def test_trace_commands_speak_json(tmp_path, capsys):
    src = write(tmp_path, "arrival_s,prompt_len,output_len\n0,8,4\n0.5,6,3\n2.0,10,5\n")
    out = run_json(capsys, ["trace", "stats", str(src)])
    assert out["requests"] == 3 and out["duration_s"] == 2.0 and out["mean_rate"] == 1.0
    assert out["prompt_len"]["max"] == 10 and out["dropped"] == {}
    out = run_json(capsys, ["trace", "convert", str(src), str(tmp_path / "t.jsonl")])
    assert (out["to"], out["requests"], out["note"]) == ("mooncake", 3, None)


def test_no_torch_for_version_validate_show_and_trace(tmp_path):
    """These commands read files; importing torch would cost them seconds."""
    (tmp_path / "t.csv").write_text("arrival_s,prompt_len,output_len\n0,8,4\n0.5,6,3\n")
    (tmp_path / "w.yaml").write_text("trace: {file: t.csv}\n")
    script = f"""
import sys
from harness.commands import main, show
try:
    main(["--version"])
except SystemExit:
    pass
assert main(["validate", {str(tmp_path / 'w.yaml')!r}, "--json"]) == 0
assert main(["show", {str(tmp_path)!r}]) == 2
assert main(["trace", "stats", {str(tmp_path / 't.csv')!r}, "--json"]) == 0
print("torch" in sys.modules, file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["run", "--help"]])
def test_the_first_minute_imports_no_command_it_does_not_run(argv):
    """`steptrace --version` and `--help` list the commands without importing one (pandas,
    numpy, the core: most of a second); `steptrace run --help` imports run's alone.
    tests/bench/test_cli_bench.py measures the time."""
    script = f"""
import json, sys
from harness.commands import main
try:
    main({argv!r})
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
      ("pandas", "numpy", "pyarrow", "torch") or m == "engine._core"
      or m.startswith("harness.commands."))), file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    commands = {m for m in loaded if m.startswith("harness.commands.")}
    assert commands == {"harness.commands.cli", "harness.commands.common"} | (
        {"harness.commands.run"} if argv[0] == "run" else set())
    if argv[0] != "run":
        assert loaded == commands


@pytest.mark.slow
def test_a_modeled_run_imports_no_torch_matplotlib_or_scipy(tmp_path):
    """A modeled run on the virtual clock needs none of them (torch alone is seconds of its
    start-up): not for the run, its kernel tables, manifest, summary or show; --help
    neither."""
    (tmp_path / "w.yaml").write_text(f"output: {tmp_path / 'results'}\n" + MODELED.replace(
        "requests: 12", "requests: 1").replace("calibration_requests: 0\n", "").replace(
        ", stack: roofline", ""))  # the step from H200's kernel tables
    script = f"""
import json, sys
from harness.commands import main
try:
    main(["--help"])
except SystemExit:
    pass
assert main(["run", {str(tmp_path / 'w.yaml')!r}]) == 0
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} &
                        {{"torch", "matplotlib", "scipy"}})), file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "harness calibration off on the virtual clock" in proc.stdout
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []


def test_progress_lines_say_the_pace_and_the_time_left(monkeypatch, capsys):
    from harness.commands import run

    clock = iter([100.0, 102.0, 104.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(run.sys.stderr, "isatty", lambda: False, raising=False)
    update = run._progress()
    for done in (0, 20, 40):
        update(done, 200)
    assert capsys.readouterr().err.splitlines() == [
        "  0/200 requests done", "  20/200 requests done, 10.0 req/s, about 18 s left",
        "  40/200 requests done, 10.0 req/s, about 16 s left"]


def test_each_run_of_a_sweep_gets_its_progress_lines(monkeypatch, capsys):
    from harness.commands import run

    clock = iter([100.0, 102.0, 104.0, 106.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(run.sys.stderr, "isatty", lambda: False, raising=False)
    update = run._progress()
    for done in (0, 200, 0, 100):  # the first run ends, the second begins
        update(done, 200)
    assert capsys.readouterr().err.splitlines() == [
        "  0/200 requests done", "  200/200 requests done, 100.0 req/s",
        "  0/200 requests done", "  100/200 requests done, 50.0 req/s, about 2 s left"]
