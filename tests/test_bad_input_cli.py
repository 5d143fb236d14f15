"""Bad input at the command line: the catalogue (docs/reliability.md).

Three classes, one rule each, every case through `steptrace` itself (harness.commands.main):

- hangs: input that cannot finish (aliases that expand without end, a FIFO no one writes
  to, nesting without end) is refused before it is expanded or opened;
- tracebacks: every expected failure is one line on stderr and exit 2 (bad input) or 1 (the
  run failed); anything else is reported as a bug, exit 1, the traceback only with --debug;
- silent acceptance: what would run as something else than written (a duplicate key, an
  unknown model or format, a device file, warm-up longer than the run) is refused, or said.

Every case checks the exit status, that the message names the file, line or row, key and
value, and that nothing was written: no run directory, no output file.
"""

import hashlib
import json
import os
import shutil
import signal
import sys
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import engine
from harness.commands import main
from harness.traces.read import read_trace
from tests.helpers import MODELED, REPO, within

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

TRACE = "arrival_s,prompt_len,max_new_tokens\n0,8,4\n0.5,6,3\n"
# 342 bytes that expand to 9**9 strings: PyYAML's own loader builds it (shared), but any walk
# over the values, a repr in a message included, never finishes
BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n" for p, k in zip("abcdefgh", "bcdefghi"))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A working directory holding a small trace; the default output (results/) lands here."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(TRACE)
    return tmp_path


def files(root: Path) -> set:
    return {p.relative_to(root) for p in root.rglob("*")}


@contextmanager
def unchanged(root: Path):
    """Nothing is written under root (no run directory, no output file, no temporary)."""
    before = files(root)
    yield
    assert files(root) == before


def steptrace(capsys, argv, status, *words, root=None):
    """Run the command; check its status, that stderr is one line holding every word, and
    that stdout is empty; return stderr."""
    root = Path(root or os.getcwd())
    with unchanged(root), within(60):
        got = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    assert got == status, err
    assert out == "", out
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    return err


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------- hangs

def test_billion_laughs_is_refused_before_expansion(home, capsys):
    path = write(home / "lol.yaml", BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 400
    for command in ("validate", "run"):
        steptrace(capsys, [command, path], 2, "lol.yaml:2: alias *a: aliases are not allowed")


@pytest.mark.parametrize("value, words", [
    ("[&x lol, *x]", "--set 'name=[&x lol, *x]': alias *x: aliases are not allowed"),
    ("{<<: {a: 1}}", "merge keys (<<) are not allowed"),
    ("!!python/object:os.system x", "the tag !!python/object:os.system is not allowed"),
    ("!!binary aGk=", "the tag !!binary is not allowed"),
    ("[" * 100 + "]" * 100, "nested deeper than 64 levels"),
])
def test_set_values_follow_the_workload_rules(home, capsys, value, words):
    path = write(home / "w.yaml", "trace: {file: t.csv}\n")
    steptrace(capsys, ["validate", path, "--set", f"name={value}"], 2, words)


def test_deep_nesting_is_refused(home, capsys):
    path = write(home / "w.yaml", "trace: {file: t.csv}\nname: " + "[" * 5000 + "]" * 5000 + "\n")
    steptrace(capsys, ["validate", path], 2, "w.yaml:2: nested deeper than 64 levels")


def test_deeply_nested_json_in_a_trace_names_the_line(home, capsys):
    path = write(home / "t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                 + "[" * 100_000 + "]" * 100_000 + "\n")
    steptrace(capsys, ["trace", "stats", path], 2, "t.jsonl:2: expected a JSON object, got JSON "
              "nested too deeply")


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_workload_that_is_not_a_regular_file_is_named_not_opened(home, capsys, kind):
    path = {"fifo": home / "w.yaml", "device": Path("/dev/zero"), "directory": home}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # opening it would wait for a writer forever
    what = {"fifo": "is a FIFO (named pipe), not a regular file",
            "device": "is a character device, not a regular file",
            "directory": "is a directory, not a regular file"}[kind]
    for command in ("validate", "run"):
        steptrace(capsys, [command, path], 2, f"{path}: {what}")


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "missing"])
def test_a_trace_that_is_not_a_regular_file_says_what_it_is(home, capsys, kind):
    path = {"fifo": home / "f.csv", "device": Path("/dev/null"), "directory": home / "d",
            "missing": home / "absent.csv"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    what = {"fifo": "is a FIFO (named pipe), not a regular file",
            "device": "is a character device, not a regular file",
            "directory": "is a directory, not a regular file", "missing": "no such file"}[kind]
    workload = write(home / "w.yaml", f"trace: {{file: {path}}}\n")
    steptrace(capsys, ["validate", workload], 2, f"w.yaml:1: trace.file: {path}: {what}")
    steptrace(capsys, ["trace", "stats", path], 2, f"{path}: {what}")
    steptrace(capsys, ["trace", "convert", path, home / "out.csv"], 2, f"{path}: {what}")
    steptrace(capsys, ["replay-scheduler", path], 2, f"{path}: {what}")


# ---------------------------------------------------------------- tracebacks

@pytest.mark.parametrize("text, words", [
    ("trace: {file: t.csv}\nmodel:\n", "w.yaml:2: model: expected a non-empty string, got no "
                                       "value (null)"),
    ("trace: {file: t.csv}\nwarmup_steps:\n", "w.yaml:2: warmup_steps: expected an integer >= 0, "
                                              "got no value (null)"),
    ("trace: {file: t.csv}\nname:\n", "w.yaml:2: name: expected a non-empty string, got no value"),
    ("trace:\n", "w.yaml:1: trace: expected exactly one of trace.file and trace.generate"),
    ("trace:\n  file:\n", "w.yaml:2: trace.file: expected a non-empty string, got no value"),
    ("trace: {file: t.csv}\nengine:\n  max_num_seqs:\n",
     "w.yaml:3: engine.max_num_seqs: expected an integer >= 1, got no value (null)"),
    ("trace:\n  generate:\n    prompt:\n", "w.yaml:3: trace.generate.prompt: expected one of "
                                            "{fixed: N}"),
    ("trace: {file: t.csv}\nengine: []\n", "w.yaml:2: engine: expected a mapping, got []"),
    ("- trace\n- engine\n", "w.yaml: (top level): expected a mapping of workload keys, got "
                            "['trace', 'engine']"),
    ("just words\n", "w.yaml: (top level): expected a mapping of workload keys, got 'just words'"),
    ("trace: {file: t.csv}\n---\nname: x\n",
     "w.yaml:2: not valid YAML: expected a single document"),
    ("trace: {file: t.csv}\nname: a\x07b\n",
     "w.yaml:2: not valid YAML: the character '\\x07' (U+0007) is not allowed"),
    ("trace: {file: t.csv}\n[a]: 1\n", "w.yaml:2: a key must be a plain name"),
    ("trace: {file: t.csv}\nname: !!binary aGk=\n", "w.yaml:2: the tag !!binary is not allowed"),
])
def test_a_broken_workload_is_one_line_exit_2(home, capsys, text, words):
    path = write(home / "w.yaml", text)
    for command in ("validate", "run"):
        steptrace(capsys, [command, path], 2, words)


def test_binary_garbage_as_a_workload_names_the_file_and_line(home, capsys):
    path = home / "w.yaml"
    path.write_bytes(b"trace: {file: t.csv}\n" + bytes(range(128, 256)) * 3)
    for command in ("validate", "run"):
        steptrace(capsys, [command, path], 2, "w.yaml:2: not a YAML text file: expected UTF-8, "
                  "got the byte 0x80")


@pytest.mark.parametrize("item, words", [
    ("trace=null", "trace: expected exactly one of trace.file and trace.generate"),
    ("engine.max_num_seqs=[1,", "--set 'engine.max_num_seqs=[1,': the value is not valid YAML"),
    ("engine.max_num_seqs=-1", "--set 'engine.max_num_seqs=-1': engine.max_num_seqs: expected "
                               "an integer >= 1, got -1"),
    ("engine=5", "--set 'engine=5': engine: expected a mapping, got 5"),
    ("engine.max_num_seqs.x=1", "--set 'engine.max_num_seqs.x=1': max_num_seqs is not a section "
                                "of a workload"),
    ("engine.foo=1", "--set 'engine.foo=1': engine.foo: unknown key; expected one of"),
    ("trace.file=", "--set 'trace.file=': trace.file: expected a non-empty string, got no value"),
    ("engine={a: 1, a: 2}", "--set 'engine={a: 1, a: 2}': a: duplicate key; YAML would keep"),
    ("nonsense", "--set 'nonsense': expected KEY.PATH=VALUE"),
])
def test_set_errors_name_the_set(home, capsys, item, words):
    path = write(home / "w.yaml", "trace: {file: t.csv}\n")
    for command in ("validate", "run"):
        steptrace(capsys, [command, path, "--set", item], 2, words)


def test_a_key_set_twice_is_refused(home, capsys):
    path = write(home / "w.yaml", "trace: {file: t.csv}\n")
    steptrace(capsys, ["validate", path, "--set", "engine.num_mtp=1", "--set",
                       "engine.num_mtp=2"], 2,
              "--set 'engine.num_mtp=2': engine.num_mtp is set twice (first --set "
              "'engine.num_mtp=1'); give it once")


@pytest.mark.parametrize("output, words", [
    ("gone", "output: {home}/gone is a broken symbolic link (to {home}/nowhere)"),
    ("/proc/self/x", "cannot make the run folder /proc/self/x/w"),
])
def test_an_output_that_cannot_hold_a_run_folder_is_bad_input(home, capsys, output, words):
    (home / "gone").symlink_to(home / "nowhere")
    path = write(home / "w.yaml", "trace: {file: t.csv}\n" + MODELED.split("\n", 2)[2]
                 + f"output: {output}\n")
    steptrace(capsys, ["run", path], 2, words.format(home=home))


def test_set_fills_a_section_left_empty(home, capsys):
    path = write(home / "w.yaml", "trace:\nengine:\n")
    assert main(["validate", str(path), "--set", "trace.file=t.csv", "--set",
                 "engine.max_num_seqs=4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["values"]["engine"]["max_num_seqs"] == 4


@pytest.fixture(scope="module")
def a_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    path = write(tmp / "g.yaml", MODELED + f"output: {tmp / 'out'}\n")
    assert main(["run", str(path)]) == 0
    (run,) = (tmp / "out" / "g").iterdir()
    return run


@pytest.mark.parametrize("manifest, words", [
    ("{not json", "manifest.json: not valid JSON (Expecting property name"),
    ("[1, 2]", "manifest.json: not a run's manifest (a JSON list, not an object)"),
    ('{"gil_mode": "held"}', "manifest.json: not a run's manifest (no key 'device')"),
    ('{"device": "cpu", "gil_mode": "held"}', "manifest.json: not a run's manifest (string "
                                              "indices must be integers"),
    ('{"device": {"name": 3}, "gil_mode": "held"}', "manifest.json: not a run's manifest "
                                                    "(device.name and gil_mode are not text"),
    ('{"device": {"name": "x"}, "gil_mode": "held", "values": "abc"}',
     "manifest.json: not a run's manifest (values is not a mapping: 'abc')"),
    ("[" * 100_000 + "]" * 100_000, "manifest.json: JSON nested too deeply"),
])
def test_show_on_a_malformed_manifest(a_run, tmp_path, capsys, manifest, words):
    run = tmp_path / "run"
    run.mkdir()
    for f in a_run.iterdir():
        (run / f.name).write_bytes(f.read_bytes())
    (run / "manifest.json").write_text(manifest)
    steptrace(capsys, ["show", run], 2, f"{run / 'manifest.json'}", words, root=tmp_path)


def test_a_fifo_as_the_manifest_is_named_not_opened(a_run, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "manifest.json")
    for argv in (["show", run], ["compare", run, "--", a_run], ["report", run, "-o", "r"],
                 ["gate", run, "--baseline", a_run]):
        steptrace(capsys, argv, 2, "manifest.json: is a FIFO (named pipe), not a regular file",
                  root=tmp_path)


@pytest.mark.parametrize("pid", [1.5, "x", 10 ** 30, 0, -1, True])
def test_a_pid_that_names_no_process_is_running_not_a_crash(a_run, tmp_path, capsys, pid):
    """os.kill(0) and os.kill(-1) would ask about whole process groups: a pid that is not
    one is a run whose state cannot be told."""
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(pid=pid, complete=False)
    manifest.pop("ended")
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main(["show", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "running"


@pytest.mark.parametrize("summary, words", [
    ("metric,stat\nrequests,finished\n", "the summary table is not a run's summary (no "
                                         "column(s) value, unit)"),
    ("metric,stat,value,unit\nrequests,finished,lots,requests\n",
     "the summary table is not a run's summary (values that are not numbers)"),
    ("", "the run ended but its summary is unreadable (No columns to parse"),
])
def test_show_on_a_malformed_summary(a_run, tmp_path, capsys, summary, words):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_bytes((a_run / "manifest.json").read_bytes())
    (run / "summary.csv").write_text(summary)
    steptrace(capsys, ["show", run], 2, str(run), words, root=tmp_path)


@pytest.fixture
def broken_validate(monkeypatch):
    """A bug planted in a command handler: a KeyError no command expects."""
    import harness.commands.validate

    def handler(args):
        return {}["planted"]
    monkeypatch.setattr(harness.commands.validate, "main", handler)


def test_a_bug_is_reported_as_one_without_a_traceback(home, capsys, broken_validate):
    path = write(home / "w.yaml", "trace: {file: t.csv}\n")
    err = steptrace(capsys, ["validate", path], 1, "steptrace: internal error: KeyError: "
                    "'planted' (at test_bad_input_cli.py:", "this is a bug in steptrace: please "
                    "report it", "with the command line", "with --debug")
    assert "File " not in err


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(home, capsys, broken_validate, where):
    path = write(home / "w.yaml", "trace: {file: t.csv}\n")
    argv = ["--debug", "validate", str(path)] if where == "before" else \
        ["validate", str(path), "--debug"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and 'return {}["planted"]' in err
    assert err.splitlines()[-1].startswith("steptrace: internal error: KeyError: 'planted'")


def test_a_failed_run_shows_its_cause_only_with_debug(home, capsys, monkeypatch):
    import harness.sweeps.sweep

    def broken(*args, **kwargs):
        raise RuntimeError("the device fell over")
    monkeypatch.setattr(harness.sweeps.sweep, "run_workload", broken)
    path = write(home / "g.yaml", MODELED)
    steptrace(capsys, ["run", path], 1, "steptrace: run failed: RuntimeError: the device fell over")
    assert main(["run", str(path), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and 'raise RuntimeError("the device fell over")' in err


@pytest.mark.parametrize("argv", [["compare", "a", "--", "b"], ["report", "a", "-o", "r"],
                                  ["gate", "a", "--baseline", "b", "--update"], ["show", "a"]])
def test_ctrl_c_in_any_command_is_one_line_and_exit_130(home, capsys, monkeypatch, argv):
    import importlib

    def ctrl_c(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(importlib.import_module(f"harness.commands.{argv[0]}"), "main", ctrl_c)
    steptrace(capsys, argv, 130, "steptrace: interrupted by SIGINT (Ctrl-C)")


@pytest.mark.parametrize("argv", [["compare", "a", "--", "b"], ["report", "a", "-o", "r"],
                                  ["gate", "a", "--baseline", "b"], ["show", "a"]])
def test_sigterm_in_any_command_is_one_line_and_exit_143(home, capsys, monkeypatch, argv):
    """SIGTERM used to kill these silently (the default action: no message, no clean-up);
    it now unwinds like Ctrl-C."""
    import importlib

    def terminated(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises before this ends
    monkeypatch.setattr(importlib.import_module(f"harness.commands.{argv[0]}"), "main",
                        terminated)
    steptrace(capsys, argv, 143, "steptrace: interrupted by SIGTERM")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # as it was before main


@pytest.mark.parametrize("argv, words", [
    (["bogus"], "steptrace: error: steptrace: argument command: invalid choice: 'bogus'"),
    (["report", "x"], "steptrace: error: steptrace report: the following arguments are "
                      "required: -o"),
    (["capacity", "w.yaml", "--max-probes", "1e9"], "argument --max-probes: invalid int value"),
])
def test_a_usage_error_is_one_line_exit_2(home, capsys, argv, words):
    steptrace(capsys, argv, 2, words)


def test_control_characters_reach_the_terminal_as_text(home, capsys):
    """A run named with escape sequences (clear the screen, retitle the window) from a
    shared results folder: every line steptrace prints shows them as escapes."""
    name = "evil\x1b[2J\x1b]0;PWN\x07\x1b[31mRED\u202e"
    path = write(home / "w.yaml", MODELED)
    assert main(["run", str(path), "--set", f"name={json.dumps(name)}"]) == 0
    out, err = capsys.readouterr()
    shown = "evil\\x1b[2J\\x1b]0;PWN\\x07\\x1b[31mRED\\u202e"
    assert shown in out and "\x1b" not in out + err
    (run_dir,) = (home / "results" / name).iterdir()
    steptrace(capsys, ["show", run_dir / "nothing"], 2, shown)
    for command in (["show", str(run_dir)], ["gate", str(run_dir), "--baseline", str(run_dir)]):
        assert main(command) == 0
        out, err = capsys.readouterr()
        assert shown in out and "\x1b" not in out + err, command


def test_ctrl_c_while_the_commands_are_imported_is_exit_130(capsys, monkeypatch):
    """The commands' modules take seconds to import (pandas, pyarrow): a Ctrl-C then is the
    same one line, not a traceback from inside an import."""
    class Interrupting:
        def find_spec(self, name, path=None, target=None):
            if name == "harness.commands.cli":
                raise KeyboardInterrupt
    monkeypatch.delitem(sys.modules, "harness.commands.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    assert main(["show", "x"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "steptrace: interrupted by SIGINT (Ctrl-C)\n"


def test_debug_changes_nothing_for_bad_input(home, capsys):
    path = write(home / "w.yaml", "trace: {file: t.csv}\nmodel:\n")
    steptrace(capsys, ["--debug", "validate", path], 2, "w.yaml:2: model:")


# ---------------------------------------------------------------- silent acceptance

@pytest.mark.parametrize("text, words", [
    ("trace: {file: t.csv}\nengine: {max_num_seqs: 4}\nengine: {num_mtp: 1}\n",
     "w.yaml:3: engine: duplicate key (first at line 2, again at line 3); YAML would keep only "
     "the last"),
    ("trace: {file: t.csv}\nengine:\n  max_num_seqs: 4\n  block_size: 8\n  max_num_seqs: 5\n",
     "w.yaml:5: engine.max_num_seqs: duplicate key (first at line 3, again at line 5)"),
    ("trace: {file: t.csv, limit: 1, limit: 2}\n",
     "w.yaml:1: trace.limit: duplicate key (first at line 1, again at line 1)"),
    ("trace: {file: t.csv}\nmodel: gpt-5\n", "w.yaml:2: model: unknown model 'gpt-5'; bundled "
                                             "models: deepseek-v3, deepseek-v4-flash, small, tiny"),
    ("trace: {file: t.csv}\nmodel: absent.yaml\n", "w.yaml:2: model: absent.yaml: no such file"),
    ("trace: {file: t.csv}\nmodel: m.yaml\n", ("w.yaml:2: model: m.yaml:", ": colour: unknown "
                                               "model field; expected one of ")),
    ("trace: {file: t.csv}\nmodel: lol.yaml\n", "w.yaml:2: model: lol.yaml:2: alias *a"),
    ("trace: {file: t.csv, format: parquet}\n", "w.yaml:1: trace.format: expected one of auto, "
                                                "azure, mooncake, burstgpt, vidur, tidy, "
                                                "sessions, mooncake_sessions, weka, got "
                                                "'parquet'"),
    ("trace:\n  generate: {burstiness: 2}\n", "w.yaml:2: trace.generate.burstiness: a "
                                              "burstiness (2) needs arrival: gamma, got poisson"),
    ("trace:\n  generate: {prompt: {lognormal: {median: 100, sigma: 1, min: 50, max: 10}}}\n",
     "w.yaml:2: trace.generate.prompt: expected lognormal: {median: M, sigma: S[, min: A, max: "
     "B]} with finite numbers > 0, integers 1 <= A <= B"),
    ("trace:\n  generate: {output: {lognormal: {median: .inf, sigma: 1}}}\n",
     "w.yaml:2: trace.generate.output: expected lognormal"),
    ("trace: {file: t.csv}\ndevice: emulated:H200\nemulated: {launch_us: 1e300}\n",
     "w.yaml:3: emulated.launch_us: expected a finite number in 0..100000.0, got 1e+300"),
    ("trace: {file: t.csv}\nname: " + "n" * 201 + "\n",
     "w.yaml:2: name: expected a run name of at most 200 bytes, got 'nnnnn"),
    ("trace: {file: t.csv, time_scale: 1e308}\n",
     "w.yaml:1: trace.time_scale: the arrivals would span 5e+307 s (time_scale 1e+308 x 0.5 s); "
     "a replay spans at most 1e+09 s"),
    ("trace:\n  generate: {requests: 10, rate: 1e-12}\n",
     "w.yaml:2: trace.generate.rate: the arrivals would span 1e+13 s"),
    ("trace:\n  generate: {prompt: {lognormal: {median: 1e20, sigma: 0.5}}}\n",
     "w.yaml:2: trace.generate.prompt: lognormal: median/mean must be a number in (0, "
     "1073741823], got 1e+20"),
    ("trace:\n  generate: {prompt: {fixed: 99999999999999999999}}\n",
     "w.yaml:2: trace.generate.prompt: fixed(value): expected an integer in 1..1073741823, got "
     "99999999999999999999"),
    ("trace:\n  generate: {output: {uniform: [1, 99999999999999999999]}}\n",
     "w.yaml:2: trace.generate.output: uniform(hi): expected an integer in 1..1073741823"),
    ("trace:\n  generate: {requests: 10000000000}\n",
     "w.yaml:2: trace.generate.requests: expected an integer in 1 .. 1000000000"),
    ("trace: {file: t.csv}\nengine: !!map {max_num_seqs: 4}\n",
     "w.yaml:2: the tag !!map is not allowed"),
    ("trace: {file: t.csv}\nfrontend: {per_token_us: 1e9}\n",
     "w.yaml:2: frontend.per_token_us: expected a finite number in 0..10000.0, got 1000000000.0"),
    ("trace: {file: t.csv}\noutput: t.csv\n", ("w.yaml:2: output: ", "t.csv exists and is not "
                                                                     "a directory")),
])
def test_what_would_run_otherwise_is_refused(home, capsys, text, words):
    tiny = Path(engine.__file__).parent / "models" / "tiny.yaml"  # the installed package's
    write(home / "m.yaml", tiny.read_text() + "colour: blue\n")
    write(home / "lol.yaml", BILLION_LAUGHS)
    path = write(home / "w.yaml", text)
    for command in ("validate", "run"):
        steptrace(capsys, [command, path], 2, *((words,) if isinstance(words, str) else words))


@pytest.mark.parametrize("raw, value", [("1e-9", 1e-9), ("1.0e300", 1e300), ("2E+1", 20.0),
                                        (".5", 0.5), ("012", 12), ("0x10", 16), ("0o10", 8)])
def test_numbers_follow_yaml_1_2(home, capsys, raw, value):
    """YAML 1.1's float pattern (PyYAML's) reads 1e-9 and 1.0e300 as strings, and 012 as
    octal: in a workload and in --set they are the numbers YAML 1.2 says."""
    path = write(home / "w.yaml", f"trace: {{file: t.csv}}\nslo: {{ttft: {raw}}}\n")
    for argv in (["validate", path, "--json"],
                 ["validate", write(home / "v.yaml", "trace: {file: t.csv}\n"), "--json",
                  "--set", f"slo.ttft={raw}"]):
        assert main(list(map(str, argv))) == 0
        got = json.loads(capsys.readouterr().out)["values"]["slo"]["ttft"]
        assert got == value and type(got) is type(value)


def test_warmup_beyond_the_requests_is_said_at_validation(home, capsys):
    path = write(home / "w.yaml", "trace: {file: t.csv, limit: 2}\nwarmup_steps: 5\n")
    assert main(["validate", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    (note,) = json.loads(out)["notes"]
    assert "warmup_steps: 5 steps of warm-up for 2 requests" in note and note in err
    path = write(home / "w.yaml", "trace: {file: t.csv, limit: 2}\nwarmup_steps: 1\n")
    assert main(["validate", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []


def test_warmup_longer_than_the_run_is_said_by_the_run_and_show(tmp_path, capsys):
    path = write(tmp_path / "g.yaml", MODELED + f"output: {tmp_path / 'out'}\n"
                 "warmup_steps: 100000\n")
    assert main(["run", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "warmup_steps: 100000 steps of warm-up for 12 requests" in err  # before it ran
    assert "note: every step was a warm-up step" in out and "every statistic is NaN" in out
    (run,) = (tmp_path / "out" / "g").iterdir()
    assert main(["show", str(run), "--json"]) == 0
    (note,) = json.loads(capsys.readouterr().out)["notes"]
    assert "none of the 12 requests was measured" in note


REJECTED = """trace: {generate: {requests: 5, rate: 20, prompt: {fixed: 3000}, output: {fixed: 4}}}
device: modeled:H200
engine: {num_kv_blocks: 16}
calibration_requests: 0
telemetry: {enabled: false}
"""


def test_a_run_whose_every_request_was_rejected_says_so(home, capsys):
    path = write(home / "w.yaml", REJECTED)
    assert main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("note: every request (5) was rejected, so every latency and throughput statistic is "
            "NaN; the first: needs 188 KV blocks for 3004 tokens (block_size 16) but a rank "
            "has 16") in out
    (run_dir,) = (home / "results" / "w").iterdir()
    assert main(["show", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"][0].startswith("every request (5) was "
                                                                       "rejected")


def test_a_run_stopped_before_any_request_finished_says_so(home, capsys):
    """Stopped after its first 64 steps, before any of its 500-token requests finished: the
    run is recorded as interrupted, and `show` says why every latency is NaN."""
    from harness.io.interrupt import Stop
    from harness.sweeps.sweep import run_workload
    from harness.workload import load_workload
    path = write(home / "w.yaml", "trace:\n  generate: {requests: 4, rate: 100, prompt: "
                 "{fixed: 8}, output: {fixed: 500}}\n" + MODELED.split("\n", 2)[2]
                 + "gil_contamination_pct: 1.0e+9\n")  # no busy-host note, however busy
    stop = Stop()
    (run,) = run_workload(load_workload(path), lambda done, total: stop.request(), stop)
    run_dir = run.path
    assert main(["show", str(run_dir), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "interrupted"
    assert shown["notes"] == ["no request finished (4 unfinished, 0 rejected), so every "
                              "latency statistic is NaN"]
    assert main(["show", str(run_dir)]) == 0
    assert "note: no request finished (4 unfinished" in capsys.readouterr().out


def test_a_run_stopped_during_its_warm_up_does_not_blame_warmup_steps(home, capsys):
    from harness.io.interrupt import Stop
    from harness.sweeps.sweep import run_workload
    from harness.workload import load_workload
    path = write(home / "w.yaml", "warmup_steps: 1000\ntrace:\n  generate: {requests: 4, "
                 "rate: 100, prompt: {fixed: 8}, output: {fixed: 500}}\n"
                 + MODELED.split("\n", 2)[2])
    stop = Stop()
    (run,) = run_workload(load_workload(path), lambda done, total: stop.request(), stop)
    run_dir = run.path
    assert main(["show", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [
        "the run was interrupted during its warm-up steps: none of the 4 requests scheduled "
        "was measured, so every statistic is NaN"]


@pytest.mark.parametrize("wait, load, said", [(0.5, "trace", False), (391.5, "trace", True),
                                              (391.5, "concurrency", False),
                                              (391.5, "offline", False)])
def test_an_engine_behind_its_arrivals_is_said(wait, load, said):
    """Latencies that measure the engine's queue, not its steps, say so; not of a closed
    loop or an offline load, whose queue is by design."""
    from harness.record import run_folder
    from harness.schema.manifest import view
    notes = run_folder._behind([dict(metric="queueing_delay", stat="p50", value=wait,
                                     unit="s")], view(dict(values=dict(load=dict(mode=load)))))
    assert bool(notes) == said
    assert not said or notes[0].startswith("the engine fell behind the arrivals: half the "
                                           "requests waited 392 s or more")


def test_a_run_in_which_nothing_finished_says_so(home):
    from harness.record import run_folder
    rows = [dict(metric="requests", stat=s, value=float(v), unit="requests") for s, v in
            (("finished", 0), ("handed_off", 0), ("rejected", 1), ("unfinished", 3))]
    assert run_folder._notes(rows, home) == ["no request finished (3 unfinished, 1 rejected), so "
                                       "every latency statistic is NaN"]


def test_a_request_longer_than_the_models_positions_is_said(home, capsys):
    write(home / "t.csv", "arrival_s,prompt_len,max_new_tokens\n0,4000,200\n")
    path = write(home / "w.yaml", "trace: {file: t.csv}\n")
    assert main(["validate", str(path)]) == 0
    assert ("model: the trace's longest request holds 4,200 tokens (prompt and output), more "
            "than the model's max_position_embeddings (4,096)") in capsys.readouterr().err


@pytest.mark.parametrize("engine, words", [
    ("{engine_type: prompt, num_mtp: 1}", "engine.num_mtp: 1 on a prompt engine, which never "
                                          "decodes: no draft is proposed or accepted"),
    ("{engine_type: prompt, overlap: true}", "engine.overlap: true on a prompt engine, which "
                                             "never decodes and reserves no lookahead"),
])
def test_a_prompt_engine_says_what_does_not_apply(home, capsys, engine, words):
    path = write(home / "w.yaml", f"trace: {{file: t.csv}}\nengine: {engine}\n")
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"steptrace: note: {path}: {words}" in err
    assert main(["validate", str(path), "--json"]) == 0
    assert any(words in n for n in json.loads(capsys.readouterr().out)["notes"])


# ---------------------------------------------------------------- traces

def refused_by_every_reader(home, capsys, name, text, words):
    """`trace stats`, `trace convert` and `run` of a trace file `name` holding `text`: each
    exit 2 naming `words`."""
    path = write(home / name, text)
    steptrace(capsys, ["trace", "stats", path], 2, words)
    steptrace(capsys, ["trace", "convert", path, home / "out.csv"], 2, words)
    workload = write(home / "w.yaml", f"trace: {{file: {name}}}\n")
    steptrace(capsys, ["run", workload], 2, words)



@pytest.mark.parametrize("name, text, words", [
    ("t.csv", "arrival_s,prompt_len,max_new_tokens\n0,8,4\n0.5,99999999999999999999,3\n",
     "t.csv:3: prompt_len: '99999999999999999999' is too large: expected an integer >= 1, at "
     "most 2**53 - 1 = 9007199254740991"),
    ("t.csv", "arrival_s,prompt_len,max_new_tokens\n0,8,4\n1e400,6,3\n",
     "t.csv:3: arrival_s: '1e400' is too large"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                '{"timestamp": 1, "input_length": 5, "output_length": 100000000000000000000}\n',
     "t.jsonl:2: output_length: 100000000000000000000 is too large"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                '{"timestamp": 1, "input_length": 1' + "0" * 400 + ', "output_length": 1}\n',
     "t.jsonl:2: input_length: 1000000000000000000000000000000000000000... (401 characters) is "
     "too large"),
])
def test_numbers_beyond_int64_are_too_large_not_negative(home, capsys, name, text, words):
    refused_by_every_reader(home, capsys, name, text, words)


def test_a_parquet_count_beyond_int64_names_the_row(home, capsys):
    pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_len": np.array([5, 2**64 - 1], np.uint64),
                  "max_new_tokens": [1, 1]}).to_parquet(home / "t.parquet")
    steptrace(capsys, ["trace", "stats", home / "t.parquet"], 2, "t.parquet: row 2: prompt_len: "
              "18446744073709551615 is too large")


def test_too_large_rows_can_be_dropped_and_counted(home):
    path = write(home / "t.csv", TRACE + "1.0,99999999999999999999,3\n2.0,5,5\n")
    res = read_trace(path, drop_bad_rows=True)
    assert res.dropped == {"too_large": 1} and res.df.prompt_len.tolist() == [8, 6, 5]


def test_a_limit_stops_the_reader(home):
    """Rows after the limit-th are not read: a bad row there is never seen."""
    path = write(home / "t.csv", TRACE + "1.0,x,3\n")
    assert len(read_trace(path, limit=2).df) == 2
    with pytest.raises(ValueError, match="t.csv:4: prompt_len: expected an integer >= 1, got 'x'"):
        read_trace(path, limit=3)
    res = read_trace(write(home / "d.csv", TRACE.replace("0.5,6,3", "0.5,0,3") + "1.0,7,7\n"),
                     drop_bad_rows=True, limit=2)
    assert res.dropped == {"zero_length": 1} and res.df.prompt_len.tolist() == [8, 7]


def big_trace(path: Path, rows: int) -> Path:
    """A trace of `rows` requests in the format the suffix names, written a block at a time."""
    rng = np.random.default_rng(0)
    arrival = np.cumsum(rng.exponential(0.01, rows))
    prompt, output = rng.integers(1, 8000, rows), rng.integers(1, 2000, rows)
    with open(path, "w") as f:
        if path.suffix == ".csv":
            f.write("arrival_s,prompt_len,max_new_tokens\n")
        for lo in range(0, rows, 100_000):
            a, p, o = (x[lo:lo + 100_000].tolist() for x in (arrival, prompt, output))
            if path.suffix == ".csv":
                f.write("".join(f"{x!r},{y},{z}\n" for x, y, z in zip(a, p, o)))
            else:
                f.write("".join(f'{{"timestamp": {round(x * 1000)}, "input_length": {y}, '
                                f'"output_length": {z}}}\n' for x, y, z in zip(a, p, o)))
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_large_trace_with_a_limit_reads_in_bounded_memory(tmp_path, suffix):
    """A 22 - 27 MB trace with limit 50: the reader holds about a chunk (2 MB traced here),
    not the file (the whole-file reader held several times the file; the figures are in
    docs/reliability.md)."""
    path = big_trace(tmp_path / f"big{suffix}", 800_000 if suffix == ".csv" else 400_000)
    size = path.stat().st_size
    assert size > 20e6
    tracemalloc.start()
    try:
        res = read_trace(path, limit=50)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size / 4, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB file"
    with open(path) as f:  # the same rows as the file's first 50 read alone
        lines = [next(f) for _ in range(50 + (suffix == ".csv"))]
    head = write(tmp_path / f"head{suffix}", "".join(lines))
    pd.testing.assert_frame_equal(read_trace(head).df, res.df)
    assert res.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()  # all of it


def test_chunks_join_seamlessly(tmp_path, monkeypatch):
    """Chunk boundaries change nothing: line numbers, the order check and the Azure clock
    carry over from chunk to chunk."""
    import harness.traces.read as traces
    monkeypatch.setattr(traces, "FIRST_CHUNK_BYTES", 64)
    monkeypatch.setattr(traces, "CHUNK_BYTES", 128)
    rows = [f"2023-11-16 18:17:{s:02d}.0000000,{s + 1},1" for s in range(40)]
    path = write(tmp_path / "a.csv", "\n".join(["TIMESTAMP,ContextTokens,GeneratedTokens", *rows]))
    res = read_trace(path)
    assert res.df.arrival_s.tolist() == list(map(float, range(40)))
    assert res.df.prompt_len.tolist() == list(range(1, 41))
    rows[30] = rows[30].replace(":30.", ":03.")
    with pytest.raises(ValueError, match=r"a\.csv:32: TIMESTAMP: '2023-11-16 18:17:03\.0000000' "
                                         r"is earlier than '2023-11-16 18:17:29\.0000000' "
                                         r"at line 31"):
        read_trace(write(tmp_path / "a.csv", "\n".join(["TIMESTAMP,ContextTokens,GeneratedTokens",
                                                        *rows])))


def test_no_run_directory_for_a_bad_trace(home, capsys):
    write(home / "bad.csv", TRACE + "1.0,x,3\n")
    path = write(home / "w.yaml", "trace: {file: bad.csv}\n")
    steptrace(capsys, ["run", path], 2, "bad.csv:4: prompt_len: expected an integer >= 1, got 'x'")
    assert not (home / "results").exists()


def mooncake(*rows) -> str:
    return "".join(json.dumps(dict(timestamp=t, input_length=p, output_length=2, hash_ids=h))
                   + "\n" for t, p, h in rows)


@pytest.mark.parametrize("trace, workload, words", [
    (mooncake((0, 600, [1, 2]), (10, 600, [1, 2, 3])), "",
     ("t.jsonl:2: hash_ids: 3 ids, but a 600-token prompt has at most 2 hash blocks of 512",)),
    (mooncake((0, 600, [1, 2]), (10, 600, [2 ** 64, 2])), "",
     ("t.jsonl:2: hash_ids: expected a list of integers in 0 .. 2**63 - 1",)),
    (mooncake((0, 600, [1, 2])), "  hash_block_size: 4611686018427387904\n",
     ("w.yaml:3: trace.hash_block_size: expected an integer in 1 .. 1073741824 or null",)),
    (mooncake((0, 600, [1, 2])), "  hash_block_size: 1048576\n",
     ("t.jsonl:1: hash_ids: 2 ids, but a 600-token prompt has at most 1 hash blocks of 1048576",)),
])
def test_trace_rows_the_engine_would_refuse_mid_run_are_found_at_validation(home, capsys, trace,
                                                                           workload, words):
    """Each of these used to pass `validate` and fail the run after it began, leaving a run
    directory; now `validate` and `run` name the file and line, and nothing is written."""
    write(home / "t.jsonl", trace)
    path = write(home / "w.yaml", "device: modeled:H200\ntrace:\n" + workload
                 + "  file: t.jsonl\n")
    for command in ("validate", "run"):
        steptrace(capsys, [command, path], 2, *words)


def test_rows_the_engine_would_refuse_can_be_dropped_and_counted(home):
    write(home / "t.jsonl", mooncake((0, 600, [1, 2]), (10, 600, [1, 2, 3])))
    assert read_trace(home / "t.jsonl", drop_bad_rows=True).dropped == {"too_many_hash_ids": 1}


if sys.platform == "win32":  # FIFOs and SIGALRM: POSIX only
    pytestmark = pytest.mark.skip("POSIX only")


def test_replay_scheduler_refuses_a_block_size_the_hash_block_does_not_fit(capsys, tmp_path):
    trace = REPO / "workloads" / "traces" / "conversation_small.jsonl"
    steptrace(capsys, ["replay-scheduler", trace, "--set", "block_size=96"], 2,
              "conversation_small.jsonl: hash block size 512 and block_size 96: one must divide "
              "the other", root=tmp_path)


@pytest.mark.parametrize("name, text, words", [
    ("t.csv", TRACE + "1,9007199254740993,3\n",
     "t.csv:4: prompt_len: '9007199254740993' is too large: expected an integer >= 1, at most "
     "2**53 - 1 = 9007199254740991"),
    ("t.csv", "arrival_s,prompt_len,prompt_len,max_new_tokens\n0,8,9,4\n",
     "t.csv:1: tidy trace: prompt_len is named twice (columns 2 and 3): one would be read, the "
     "other ignored; keep one"),
    ("t.csv", "arrival_s,prompt_len,max_new_tokens,output_len\n0,8,4,5\n",
     "t.csv:1: tidy trace: both max_new_tokens and its older name output_len (columns 3 and 4)"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                '{"timestamp": 1, "input_length": 5, "input_length": 50, "output_length": 1}\n',
     "t.jsonl:2: expected a JSON object, got one giving the key 'input_length' twice"),
    ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                '{"timestamp": 1, "input_length": "10", "output_length": 1}\n',
     "t.jsonl:2: input_length: expected an integer >= 1, got '10'"),
    ("t.csv", TRACE + "1,\u0661\u0660,3\n",
     "t.csv:4: prompt_len: expected an integer >= 1, got '\u0661\u0660'"),
    ("t.csv", TRACE + "1,\uff11\uff10,3\n",
     "t.csv:4: prompt_len: expected an integer >= 1, got '\uff11\uff10'"),
])
def test_a_trace_read_as_something_else_is_refused(home, capsys, name, text, words):
    """Each of these used to be read: rounded (2**53 + 1), one of two columns or keys
    silently ignored, a JSON string or other digits taken for a number."""
    refused_by_every_reader(home, capsys, name, text, words)


def test_a_parquet_trace_with_a_column_twice_names_it(home, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table([[0.0, 1.0], [0.0, 2.0], [3, 3], [1, 1]],
                            names=["arrival_s", "arrival_s", "prompt_len", "max_new_tokens"]),
                   home / "t.parquet")  # `trace stats` used to end in an IndexError
    steptrace(capsys, ["trace", "stats", home / "t.parquet"], 2,
              "t.parquet: arrival_s is named twice (columns 1 and 2)")


def test_converting_to_ms_beyond_a_double_is_bad_input(home, capsys):
    """1e307 s is 1e310 ms: `trace convert` to Mooncake JSONL used to end in an OverflowError."""
    path = write(home / "t.csv", TRACE + "1e307,5,5\n")
    steptrace(capsys, ["trace", "convert", path, home / "out.jsonl"], 2,
              "out.jsonl: row 3: arrival_s: 1e+307 is too large for a timestamp in ms: at most "
              "1.798e+305 s")
    assert main(["trace", "convert", str(path), str(home / "out.csv")]) == 0  # seconds hold it


@pytest.mark.parametrize("link", [False, True])
def test_convert_onto_a_fifo_is_bad_input_and_leaves_it(home, capsys, link):
    os.mkfifo(home / "pipe")
    dst = home / ("link.csv" if link else "pipe")
    if link:
        dst.symlink_to(home / "pipe")
    what = f"a symbolic link to {os.path.realpath(home / 'pipe')}, " if link else ""
    steptrace(capsys, ["trace", "convert", home / "t.csv", dst], 2,
              f"{dst}: is {what}a FIFO (named pipe), not a regular file; give the output "
              f"file's path")
    assert (home / "pipe").is_fifo()


# ---------------------------------------------------------------- what misleads

HINT = "is a pattern the shell did not expand (no path matches it)"


@pytest.mark.parametrize("argv, words", [
    (["validate", "w.yaml", "results/x/*"], "unrecognized arguments: results/x/*"),
    (["show", "results/x/*"], "results/x/*: not a run directory"),
    (["gate", "results/x/r?", "--baseline", "results/b"], "results/x/r?: matches nothing"),
    (["compare", "results/[ab]", "--", "results/c"], "results/[ab]: matches nothing"),
])
def test_a_pattern_the_shell_did_not_expand_is_said(home, capsys, argv, words):
    write(home / "w.yaml", "trace: {file: t.csv}\n")
    err = steptrace(capsys, argv, 2, words, HINT)
    assert err.count(HINT) == 1


def test_a_pattern_that_matches_or_a_set_value_gets_no_hint(home, capsys):
    write(home / "w.yaml", "trace: {file: t.csv}\n")
    (home / "runs" / "r1").mkdir(parents=True)  # matched by the shell's and steptrace's glob
    err = steptrace(capsys, ["show", "runs/r*"], 2, "runs/r*: not a run directory")
    assert "shell" not in err
    err = steptrace(capsys, ["validate", "w.yaml", "--set", "name=[a*"], 2, "not valid YAML")
    assert "shell" not in err
