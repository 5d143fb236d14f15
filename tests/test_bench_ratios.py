"""steptrace gate --bench: the benchmarks' C++ / reference ratios against a stored
baseline, on pytest-benchmark JSON files written here."""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from harness.commands import main
from tests.helpers import REPO, within


def bench_json(path, medians):
    """A pytest-benchmark result: {(impl, n): median seconds} of test_decode_round."""
    path.write_text(json.dumps({"benchmarks": [
        {"name": f"test_decode_round[{impl}-{n}]", "params": {"impl": impl, "n": n},
         "stats": {"median": median}} for (impl, n), median in medians.items()]}))
    return str(path)


def test_update_stores_the_lowest_ratio_and_the_gate_judges_against_it(tmp_path, capsys):
    a = bench_json(tmp_path / "a.json", {("cpp", 64): 1e-6, ("reference", 64): 100e-6})
    b = bench_json(tmp_path / "b.json", {("cpp", 64): 2e-6, ("reference", 64): 100e-6})
    ratios = tmp_path / "ratios.json"
    assert main(["gate", "--bench", a, b, "--baseline", str(ratios), "--update"]) == 0
    stored = json.loads(ratios.read_text())
    assert stored["ratios"] == {"test_decode_round[n=64]": 50.0}
    assert stored["kind"] == "steptrace gate --bench ratios"  # what --update may replace
    capsys.readouterr()
    # tolerance 0.6: the floor is 20x
    ok = bench_json(tmp_path / "ok.json", {("cpp", 64): 4e-6, ("reference", 64): 100e-6})
    assert main(["gate", "--bench", ok, "--baseline", str(ratios)]) == 0
    assert ": pass" in capsys.readouterr().out
    slow = bench_json(tmp_path / "slow.json", {("cpp", 64): 6e-6, ("reference", 64): 100e-6})
    assert main(["gate", "--bench", "--json", slow, "--baseline", str(ratios)]) == 1
    (check,) = json.loads(capsys.readouterr().out)["checks"]
    assert check == dict(case="test_decode_round[n=64]", baseline=50.0,
                         measured=pytest.approx(100 / 6), floor=pytest.approx(20),
                         broken=True)
    assert main(["gate", "--bench", slow, "--baseline", str(ratios)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "test_decode_round[n=64]" in out and "BROKEN" in out


def test_the_committed_ratios_name_cases_the_suite_measures():
    stored = json.loads((REPO / "tests" / "bench" / "ratios.json").read_text())
    assert stored["kind"] == "steptrace gate --bench ratios"
    assert 0 <= stored["tolerance"] < 1
    assert {case.split("[")[0] for case in stored["ratios"]} == {"test_decode_round",
                                                                  "test_cost_model"}


def test_bad_input_exits_2(tmp_path, capsys):
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps({"tolerance": 0.6, "ratios": {"test_decode_round[n=1024]": 300}}))
    other = bench_json(tmp_path / "o.json", {("cpp", 64): 1e-6, ("reference", 64): 1e-4})
    assert main(["gate", "--bench", other, "--baseline", str(ratios)]) == 2
    assert "no measurement of test_decode_round[n=1024]" in capsys.readouterr().err
    (tmp_path / "x.json").write_text("[]")
    assert main(["gate", "--bench", str(tmp_path / "x.json"), "--baseline", str(ratios)]) == 2
    assert "x.json: expected a JSON object" in capsys.readouterr().err
    (tmp_path / "y.json").write_text("{}")
    assert main(["gate", "--bench", str(tmp_path / "y.json"), "--baseline", str(ratios)]) == 2
    assert "not a pytest-benchmark JSON file" in capsys.readouterr().err


def refused(capsys, *says):
    """Exit 2's one line on stderr, saying each of `says`; nothing on stdout."""
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("steptrace: error: ") and err.count("\n") == 1, err
    assert all(s in err for s in says), err


RATIOS = {"kind": "steptrace gate --bench ratios", "tolerance": 0.6,
          "ratios": {"test_decode_round[n=64]": 50.0}}
GOOD = {"name": "test_decode_round[cpp-64]", "params": {"impl": "cpp", "n": 64},
        "stats": {"median": 1e-6}}
REFERENCE = {"name": "test_decode_round[reference-64]", "params": {"impl": "reference", "n": 64},
             "stats": {"median": 1e-4}}


@pytest.mark.parametrize("text, says", [
    ("not json at all", ": unreadable (Expecting value"),
    ('{"machine_info": {}}', ": no key 'benchmarks': not a pytest-benchmark JSON file"),
    (json.dumps({"benchmarks": [GOOD, {"params": {"impl": "reference", "n": 64},
                                       "stats": {"median": 1e-4}}]}),
     ': benchmarks[1]: "name": expected the benchmark\'s test name, got None'),
    (json.dumps({"benchmarks": [dict(GOOD, stats={"median": "fast"}), REFERENCE]}),
     ": benchmarks[0] (test_decode_round[cpp-64]): stats.median: expected a positive number "
     "of seconds, got 'fast'"),
    (json.dumps({"benchmarks": [GOOD, dict(REFERENCE, stats={"median": float("nan")})]}),
     ": benchmarks[1] (test_decode_round[reference-64]): stats.median: expected a positive "
     "number of seconds, got nan"),
    (json.dumps({"benchmarks": [dict(GOOD, stats={"median": float("inf")}), REFERENCE]}),
     ": benchmarks[0] (test_decode_round[cpp-64]): stats.median: expected a positive number "
     "of seconds, got inf"),
    (json.dumps({"benchmarks": [dict(GOOD, stats={}), REFERENCE]}),
     ": benchmarks[0] (test_decode_round[cpp-64]): stats.median: expected a positive number "
     "of seconds, got None"),
    (json.dumps({"benchmarks": [GOOD, REFERENCE, "test_x"]}),
     ": benchmarks[2]: expected an object, got str"),
    (json.dumps({"benchmarks": [dict(GOOD, params=["cpp"]), REFERENCE]}),
     ": benchmarks[0] (test_decode_round[cpp-64]): \"params\": expected an object"),
    (json.dumps({"benchmarks": [GOOD, REFERENCE, GOOD]}),
     ": benchmarks[2] (test_decode_round[cpp-64]): a second measurement of "
     "test_decode_round[n=64] impl=cpp (the first: "),
])
def test_a_malformed_benchmark_file_names_the_entry(tmp_path, capsys, text, says):
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps(RATIOS))
    bench = tmp_path / "bench.json"
    bench.write_text(text)
    assert main(["gate", "--bench", str(bench), "--baseline", str(ratios)]) == 2
    refused(capsys, f"steptrace: error: {bench}{says}")
    assert main(["gate", "--bench", str(bench), "--baseline", str(tmp_path / "new.json"),
                 "--update"]) == 2  # nor stored
    refused(capsys, f"{bench}{says}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "ratios.json"]


@pytest.mark.parametrize("stored, says", [
    (dict(RATIOS, ratios={}), '"ratios" names no case: a ratios file judges at least one'),
    (dict(RATIOS, ratios={"test_decode_round[n=64]": "fifty"}),
     "ratios.test_decode_round[n=64]: expected a positive number, got 'fifty'"),
    (dict(RATIOS, ratios={"test_decode_round[n=64]": float("nan")}),
     "ratios.test_decode_round[n=64]: expected a positive number, got nan"),
    (dict(RATIOS, tolerance=float("nan")), 'expected {"tolerance": a number in [0, 1)'),
    (dict(RATIOS, tolerance=True), 'expected {"tolerance": a number in [0, 1)'),
])
def test_a_ratios_file_that_judges_nothing_is_bad_input(tmp_path, capsys, stored, says):
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps(stored))
    bench = bench_json(tmp_path / "b.json", {("cpp", 64): 1e-6, ("reference", 64): 1e-4})
    assert main(["gate", "--bench", bench, "--baseline", str(ratios)]) == 2
    refused(capsys, f"{ratios}: {says}")


def test_a_benchmark_file_without_the_ratios_cases_does_not_pass(tmp_path, capsys):
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps(RATIOS))
    other = bench_json(tmp_path / "o.json", {("cpp", 256): 1e-6, ("reference", 256): 1e-4})
    assert main(["gate", "--bench", other, "--baseline", str(ratios)]) == 2
    refused(capsys, f"{other}: no measurement of test_decode_round[n=64]",
            "measured: test_decode_round[n=256]")
    unpaired = tmp_path / "u.json"
    unpaired.write_text(json.dumps({"benchmarks": [GOOD]}))  # no reference side
    assert main(["gate", "--bench", str(unpaired), "--baseline", str(ratios)]) == 2
    refused(capsys, f"{unpaired}: no measurement of test_decode_round[n=64]", "measured: none")


@pytest.mark.parametrize("alias", ["same path", "symbolic link", "hard link"])
def test_update_never_overwrites_the_benchmark_file_it_reads(tmp_path, capsys, alias):
    bench = Path(bench_json(tmp_path / "bench.json", {("cpp", 64): 1e-6,
                                                      ("reference", 64): 1e-4}))
    before = bench.read_bytes()
    target = {"same path": bench, "symbolic link": tmp_path / "link.json",
              "hard link": tmp_path / "hard.json"}[alias]
    if alias == "symbolic link":
        target.symlink_to(bench)
    elif alias == "hard link":
        os.link(bench, target)
    assert main(["gate", "--bench", str(bench), "--baseline", str(target), "--update"]) == 2
    refused(capsys, f"{target}: " + ("a symbolic link (to " if alias == "symbolic link" else
                                     f"the benchmark JSON file --update reads ({bench})"))
    assert bench.read_bytes() == before


@pytest.mark.parametrize("content, says", [
    (json.dumps({"benchmarks": []}), "is not a ratios file: a pytest-benchmark result (key "
                                     "'benchmarks')"),
    (json.dumps({"tolerance": 0.6, "ratios": {}}), "is not a ratios file: a JSON object with "
                                                   "no \"kind\" (keys: 'tolerance', 'ratios')"),
    ("name: a YAML file\n", "is not a ratios file: unreadable (Expecting value"),
    ("[" * 100_000, "is not a ratios file: unreadable (JSON nested too deeply)"),
    (json.dumps([1, 2]), "is not a ratios file: a JSON list"),
])
def test_update_replaces_only_a_ratios_file(tmp_path, capsys, content, says):
    bench = bench_json(tmp_path / "bench.json", {("cpp", 64): 1e-6, ("reference", 64): 1e-4})
    target = tmp_path / "other.json"
    target.write_text(content)
    assert main(["gate", "--bench", bench, "--baseline", str(target), "--update"]) == 2
    refused(capsys, f"{target} {says}", "--update replaces only a ratios file")
    assert target.read_text() == content


def test_update_refuses_a_folder_and_accepts_an_empty_file_and_the_committed_one(tmp_path,
                                                                                capsys):
    bench = bench_json(tmp_path / "bench.json", {("cpp", 64): 1e-6, ("reference", 64): 1e-4})
    (tmp_path / "dir").mkdir()
    assert main(["gate", "--bench", bench, "--baseline", str(tmp_path / "dir"), "--update"]) == 2
    refused(capsys, f"{tmp_path / 'dir'}: not a file: --update writes a ratios file")
    (tmp_path / "empty.json").touch()
    committed = tmp_path / "ratios.json"
    shutil.copyfile(REPO / "tests" / "bench" / "ratios.json", committed)
    for target in (tmp_path / "empty.json", committed):
        assert main(["gate", "--bench", bench, "--baseline", str(target), "--update"]) == 0
        assert json.loads(target.read_text())["ratios"] == {"test_decode_round[n=64]": 100.0}


def test_update_onto_a_full_disk_exits_1_and_keeps_the_previous_file(tmp_path, monkeypatch,
                                                                     capsys):
    bench = bench_json(tmp_path / "bench.json", {("cpp", 64): 1e-6, ("reference", 64): 1e-4})
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps(RATIOS))
    space = os.strerror(errno.ENOSPC)

    def no_space(fd):
        raise OSError(errno.ENOSPC, space)
    monkeypatch.setattr(os, "fsync", no_space)
    assert main(["gate", "--bench", bench, "--baseline", str(ratios), "--update"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"steptrace: run failed: cannot write {ratios}: {space}\n"
    assert json.loads(ratios.read_text()) == RATIOS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json", "ratios.json"]


@pytest.mark.parametrize("role", ["benchmark file", "ratios file"])
@pytest.mark.parametrize("damage, says", [
    ("fifo", ": is a FIFO (named pipe), not a regular file"),
    ("deep", ": unreadable (JSON nested too deeply)"),
])
def test_a_fifo_or_a_deeply_nested_file_is_bad_input(tmp_path, capsys, role, damage, says):
    """A FIFO would block the reader until a writer came; 100,000 levels of JSON exhaust
    the parser's recursion."""
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps(RATIOS))
    bench = Path(bench_json(tmp_path / "bench.json", {("cpp", 64): 1e-6,
                                                      ("reference", 64): 1e-4}))
    bad = tmp_path / "bad.json"
    if damage == "fifo":
        os.mkfifo(bad)
    else:
        bad.write_text("[" * 100_000 + "]" * 100_000)
    argv = ["gate", "--bench", str(bad), "--baseline", str(ratios)] \
        if role == "benchmark file" else ["gate", "--bench", str(bench), "--baseline", str(bad)]
    with within(20):
        assert main(argv) == 2
        refused(capsys, f"{bad}{says}")
        if role == "benchmark file":  # nor stored
            assert main(["gate", "--bench", str(bad), "--baseline", str(ratios),
                         "--update"]) == 2
            refused(capsys, f"{bad}{says}")
        else:  # nor replaced
            assert main(["gate", "--bench", str(bench), "--baseline", str(bad), "--update"]) == 2
            refused(capsys, f"{bad}", "--update")
    assert json.loads(ratios.read_text()) == RATIOS


@pytest.mark.parametrize("medians, ratio", [
    ({("cpp", 64): 1e-300, ("reference", 64): 1e300}, "inf"),
    ({("cpp", 64): 1e300, ("reference", 64): 1e-300}, "0.0"),
])
def test_a_ratio_out_of_range_is_bad_input_and_never_stored(tmp_path, capsys, medians, ratio):
    ratios = tmp_path / "ratios.json"
    ratios.write_text(json.dumps(RATIOS))
    bench = bench_json(tmp_path / "bench.json", medians)
    says = f"{bench}: test_decode_round[n=64]: reference / C++ median"
    assert main(["gate", "--bench", bench, "--baseline", str(ratios)]) == 2
    refused(capsys, says, f"is {ratio}, not a finite positive ratio")
    assert main(["gate", "--bench", bench, "--baseline", str(ratios), "--update"]) == 2
    refused(capsys, says)
    assert json.loads(ratios.read_text()) == RATIOS


def test_what_update_stores_the_next_gate_reads(tmp_path, capsys):
    """A ratio below 0.05 (the C++ side the slower) is not stored as 0.0, which the next
    gate would refuse."""
    bench = bench_json(tmp_path / "bench.json", {("cpp", 64): 1e-3, ("reference", 64): 1e-5})
    ratios = tmp_path / "ratios.json"
    assert main(["gate", "--bench", bench, "--baseline", str(ratios), "--update"]) == 0
    assert json.loads(ratios.read_text())["ratios"] == {"test_decode_round[n=64]": 0.01}
    assert main(["gate", "--bench", bench, "--baseline", str(ratios)]) == 0
