"""Workload validation: every error names the file, the line, the key and what was expected."""

from pathlib import Path

import pytest

from harness.commands import main
from harness.workload import WorkloadError, load_workload

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path, text, trace=True):
    if trace:
        (tmp_path / "t.csv").write_text("arrival_s,prompt_len,output_len\n0,8,4\n0.5,6,3\n")
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


def test_two_lines_are_a_valid_workload(tmp_path):
    w = load_workload(write(tmp_path, "trace:\n  file: t.csv\n"))
    assert w.name == "w" and w.clock == "real" and w.gil_modes == ("released",)
    assert w.values["engine"]["max_num_batched_tokens"] == 8192  # SchedulerConfig's default
    assert w.trace_file == (tmp_path / "t.csv").resolve()


def test_modeled_device_defaults_to_the_virtual_clock(tmp_path):
    w = load_workload(write(tmp_path, "trace: {file: t.csv}\ndevice: modeled:H200\ngil: both\n"))
    assert w.clock == "virtual" and w.gil_modes == ("released", "held")
    assert w.engine_config("held").executor == "modeled:H200"


@pytest.mark.parametrize("text, words", [
    ("trace: {file: t.csv}\nfoo: 1\n", "w.yaml:2: foo: unknown key; expected one of name, trace"),
    ("trace: {file: t.csv}\nengine:\n  max_num_seqs: 0\n",
     "w.yaml:3: engine.max_num_seqs: expected an integer >= 1, got 0"),
    ("trace: {file: t.csv}\nengine:\n  overlap: yes please\n",
     "w.yaml:3: engine.overlap: expected true or false, got 'yes please'"),
    ("trace: {file: t.csv}\nengine:\n  engine_type: decode\n",
     "w.yaml:3: engine.engine_type: engine_type must be one of normal, prompt, completion"),
    ("trace: {file: t.csv}\ndevice: tpu\n",
     "w.yaml:2: device: expected one of auto, cpu, cuda, npu, got 'tpu'"),
    ("trace: {file: t.csv}\ndevice: modeled:A100\n", "w.yaml:2: device: expected modeled:<profile>"),
    ("trace: {file: t.csv}\nclock: fast\n", "w.yaml:2: clock: expected one of real, virtual"),
    ("trace: {file: missing.csv}\n", "w.yaml:1: trace.file: "),
    ("name: x\n", "trace: expected exactly one of trace.file and trace.generate"),
    ("trace:\n  file: t.csv\n  generate: {requests: 3}\n", "expected exactly one of trace.file"),
    ("trace:\n  generate:\n    prompt: {gauss: 3}\n",
     "w.yaml:3: trace.generate.prompt: expected one of {fixed: N}"),
    ("trace: {file: t.csv}\nmtp_acceptance: 1.5\n",
     "w.yaml:2: mtp_acceptance: expected a finite number in 0..1 or null, got 1.5"),
    ("trace: {file: t.csv, time_scale: .inf}\n",
     "w.yaml:1: trace.time_scale: expected a finite number > 0, got inf"),
    ("trace: {file: t.csv}\ntelemetry: {interval_s: .nan}\n",
     "w.yaml:2: telemetry.interval_s: expected a finite number >= 0.01, got nan"),
    ("trace: {file: t.csv}\nname: ../../x\n", "w.yaml:2: name: expected a run name: one path"),
    ("trace: {file: t.csv}\nname: /tmp/x\n", "w.yaml:2: name: expected a run name: one path"),
    ("trace: {file: t.csv}\ndevice: modeled:H200\nclock: real\n",
     "w.yaml:3: clock: a modeled device has no real clock"),
    ("trace: {file: t.csv}\ndevice: modeled:H200\nfrontend: {mode: thread}\n",
     "w.yaml:3: frontend.mode: a frontend thread runs on the real clock"),
    ("trace: {file: t.csv}\nfrontend: {per_token_us: -1}\n",
     "w.yaml:2: frontend.per_token_us: expected a finite number in 0..10000.0, got -1"),
    ("trace: {file: t.csv}\ngil: held\ngil_aa: true\n",
     "w.yaml:3: gil_aa: an A/A arm repeats the released arm"),
    ("trace: {file: t.csv}\ngil_switch_interval_s: [0.005, 0]\n",
     "w.yaml:2: gil_switch_interval_s: expected a number of seconds > 0, or a non-empty list"),
    ("trace: {file: t.csv}\ndevice: emulated:H200\nemulated: {launch_us: .inf}\n",
     "w.yaml:3: emulated.launch_us: expected a finite number in 0..100000.0, got inf"),
    ("trace: {file: t.csv\n", "w.yaml:2: not valid YAML"),
])
def test_errors_name_file_line_key_and_expectation(tmp_path, text, words):
    with pytest.raises(WorkloadError, match=words.replace("{", r"\{").replace("}", r"\}")
                       .replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        load_workload(write(tmp_path, text))


def test_overrides_are_checked_like_the_file(tmp_path):
    path = write(tmp_path, "trace: {file: t.csv}\n")
    assert load_workload(path, ("engine.num_mtp=1",)).values["engine"]["num_mtp"] == 1
    with pytest.raises(WorkloadError, match="engine.num_mtp: expected an integer >= 0, got -1"):
        load_workload(path, ("engine.num_mtp=-1",))


def test_validate_and_bad_run_exit_2_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, "trace: {file: t.csv}\nengine: {block_size: 0}\noutput: out\n")
    assert main(["validate", str(path)]) == 2
    assert main(["run", str(path)]) == 2
    assert "engine.block_size: expected an integer >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bundled_workloads_are_valid(monkeypatch):
    monkeypatch.chdir(REPO)  # validation rows name their model and device files from here
    paths = sorted((REPO / "workloads").glob("*.yaml")) \
        + sorted((REPO / "workloads" / "validation").glob("*.yaml"))
    assert len(paths) > 20
    for path in paths:
        assert main(["validate", str(path)]) == 0, path


def test_docs_name_every_workload_key():
    from harness.workload.schema import SCHEMA
    doc = (REPO / "docs" / "workloads.md").read_text()

    def keys(schema):
        for name, spec in schema.items():
            yield name
            if isinstance(spec, dict):
                yield from keys(spec)
    missing = [k for k in keys(SCHEMA) if f"`{k}`" not in doc]
    assert not missing, f"docs/workloads.md lacks {missing}"
