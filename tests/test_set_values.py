"""`--set KEY.PATH=VALUE` (harness/workload/overrides.py, docs/workloads.md): the value is
YAML where YAML reads it as the value written out, and the text as written where YAML
would read something else (a plain text's comment dropped, a block mapping or list, lines
folded); a value YAML reads otherwise followed by a comment refused; the same in every
command that takes `--set`."""

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
    "a\n b # c", "mtp: on # c", "- x # c",
    "mtp: on",  # YAML: {mtp: true}
    "x: ", "- x",  # YAML: {x: null}, [x]
    "a\n b",  # YAML: "a b"
    "# x",  # YAML: nothing
])
def test_a_value_yaml_would_read_otherwise_is_the_text_as_written(raw):
    assert parse_set(f"a.b={raw}") == (("a", "b"), raw.strip())


@pytest.mark.parametrize("raw, read", [
    ("8 # tuned", "'8'"), ('"a" #c', "'\"a\"'"), ("on # x", "'on'"), ("null #", "'null'"),
    ("[1, 2] # x", "'[1, 2]'"), ("{a: 1} #", "'{a: 1}'"), ("'x' # y", "\"'x'\""),
    ("[1,\n 2] # x", "'[1,\\n 2]'"),
])
def test_a_value_yaml_reads_with_a_comment_is_refused(raw, read):
    """It was the text as typed: `8 # tuned` then refused as no integer, `"a" #c` the text
    `"a" #c`, quotes and all."""
    with pytest.raises(ValueError) as e:
        parse_set(f"a.b={raw}")
    said = str(e.value)
    assert said.startswith(f"--set {'a.b=' + raw!r}: YAML reads {read} and a comment (")
    assert said.endswith(f"--set takes no comment: drop it, or quote the whole text "
                         f"(a.b={json.dumps(raw)})") and "\n" not in said


def test_a_word_yaml_reads_for_a_name_says_to_quote_it(home, capsys):  # noqa: F811
    path = write(home / "w.yaml", TINY)
    for raw, read in (("on", "True"), ("12", "12")):
        steptrace(capsys, ["validate", path, "--set", f"name={raw}"], 2,
                  f"--set 'name={raw}': name: expected a non-empty string, got {read} (YAML "
                  f"reads it as ", ": quote the text")
    steptrace(capsys, ["validate", write(home / "n.yaml", "name: yes\n" + TINY)], 2,
              "n.yaml:1: name: expected a non-empty string, got True (YAML reads it as true "
              "or false: quote the text")
    err = steptrace(capsys, ["validate", path, "--set", "device=on"], 2, "got True")
    assert "quote" not in err  # no device is named `true`: quoting it would not help


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
    """4 and a comment was 4, silently; then the text, refused as no integer: the comment
    is refused, in every command alike."""
    path = write(home / "w.yaml", TINY)
    if command == "sweep":
        path = write(home / "s.yaml", "base: w.yaml\naxes: {device: [modeled:B200]}\n")
    steptrace(capsys, [command, path, "--set", "engine.max_num_seqs=4 # four"], 2,
              "--set 'engine.max_num_seqs=4 # four': YAML reads '4' and a comment ('# four'); "
              "--set takes no comment")


def test_replay_scheduler_reads_a_set_alike(home, capsys, tmp_path):  # noqa: F811
    trace = write(home / "t.csv", "arrival_s,prompt_len,max_new_tokens\n0,8,4\n")
    steptrace(capsys, ["replay-scheduler", trace, "--set", "num_kv_blocks=512 # x"], 2,
              "--set 'num_kv_blocks=512 # x': YAML reads '512' and a comment", root=tmp_path)
