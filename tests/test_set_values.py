"""`--set KEY.PATH=VALUE` (harness/workload/overrides.py, docs/workloads.md): the value is
YAML where YAML reads it as the value written out, and the text as written where YAML
would read something else (a comment dropped, a block mapping or list, lines folded), the
same in every command that takes `--set`."""

import json

import pytest

from harness.commands import main
from harness.workload.overrides import parse_set
from tests.test_bad_input_cli import home, steptrace, write  # noqa: F401 - home: a fixture
from tests.test_sweep_points import TINY

pytestmark = pytest.mark.core  # `run` runs the engine: the sanitizer stage runs it too


@pytest.mark.parametrize("raw, value", [
    ("8", 8), ("1e-9", 1e-9), ("true", True), ("on", True), ("null", None), ("", None),
    ("H200", "H200"), ("modeled:B200", "modeled:B200"), ('"8"', "8"), ("'x #1'", "x #1"),
    ("[1, 2]", [1, 2]), ("{mtp: on}", {"mtp": True}), ("[1,\n 2]", [1, 2]), ("a#b", "a#b"),
    (" padded ", "padded"),
])
def test_a_value_is_yaml_where_yaml_reads_it_as_written(raw, value):
    got = parse_set(f"a.b={raw}")
    assert got == (("a", "b"), value) and type(got[1]) is type(value)


@pytest.mark.parametrize("raw", [
    "D/my results #1",  # YAML: D/my results, and a comment
    "4 # four", "[1, 2] # x", "{a: 1} #",
    "mtp: on",  # YAML: {mtp: true}
    "x: ", "- x",  # YAML: {x: null}, [x]
    "a\n b",  # YAML: "a b"
    "# x",  # YAML: nothing
])
def test_a_value_yaml_would_read_otherwise_is_the_text_as_written(raw):
    assert parse_set(f"a.b={raw}") == (("a", "b"), raw.strip())


def test_an_output_holding_a_hash_is_that_folder(home, capsys):  # noqa: F811 - the fixture
    path = write(home / "w.yaml", TINY)
    assert main(["validate", str(path), "--set", "output=D/my results #1", "--set",
                 "name=mtp: on", "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    assert (values["output"], values["name"]) == ("D/my results #1", "mtp: on")
    assert main(["run", str(path), "--set", "output=D/my results #1", "--json"]) == 0
    run_dir = json.loads(capsys.readouterr().out)["runs"][0]["run_dir"]
    assert run_dir.startswith("D/my results #1/w/") and (home / run_dir).is_dir(), run_dir
    assert sorted(p.name for p in (home / "D").iterdir()) == ["my results #1"]


@pytest.mark.parametrize("command", ["validate", "run", "capacity", "sweep"])
def test_every_command_reads_a_set_alike(home, capsys, command):  # noqa: F811 - the fixture
    """4 and a comment was 4, silently: it is the text, which no integer key takes."""
    path = write(home / "w.yaml", TINY)
    if command == "sweep":
        path = write(home / "s.yaml", "base: w.yaml\naxes: {device: [modeled:B200]}\n")
    steptrace(capsys, [command, path, "--set", "engine.max_num_seqs=4 # four"], 2,
              "--set 'engine.max_num_seqs=4 # four': engine.max_num_seqs: expected an "
              "integer >= 1, got '4 # four'")


def test_replay_scheduler_reads_a_set_alike(home, capsys, tmp_path):  # noqa: F811
    trace = write(home / "t.csv", "arrival_s,prompt_len,max_new_tokens\n0,8,4\n")
    steptrace(capsys, ["replay-scheduler", trace, "--set", "num_kv_blocks=512 # x"], 2,
              "num_kv_blocks must be an integer, got '512 # x'", root=tmp_path)
